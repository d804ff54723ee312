//! Helpers shared by the tests that start `puffer serve` as a child process.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

/// Reads a pipe to its end on a thread, keeping the text.
pub fn collect(pipe: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let mut sink = sink.lock().expect("stderr lock");
            sink.push_str(&line);
            sink.push('\n');
        }
    });
    text
}

/// Sends the pipe's first line (None at its end), then keeps draining it.
pub fn first_line(pipe: impl Read + Send + 'static) -> mpsc::Receiver<Option<String>> {
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        let mut lines = BufReader::new(pipe).lines().map_while(Result::ok);
        let _ = sender.send(lines.next());
        lines.for_each(drop);
    });
    receiver
}
