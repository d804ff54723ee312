// Generates the gRPC service of proto/replica.proto (needs protoc: Debian's
// protobuf-compiler, or PROTOC set to a protoc binary).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/replica.proto");
    tonic_build::configure().compile_protos(&["proto/replica.proto"], &["proto"])?;
    Ok(())
}
