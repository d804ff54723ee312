#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    puffer_fuzz::harness::wal(data);
});
