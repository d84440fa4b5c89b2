//! A webhook receiver on 127.0.0.1, for what idemgate tells a route's `notify`.

use std::io::{BufRead, BufReader, Read, Write};

/// A webhook receiver on 127.0.0.1: its base URL, and what it was sent. It answers the first
/// request `500` (the sender must try again) and the others `200`.
pub fn hook_receiver() -> (String, std::sync::mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut conn) = conn else { return };
            let mut r = BufReader::new(conn.try_clone().expect("clone"));
            let (mut length, mut signature, mut line) = (0, String::new(), String::new());
            while r.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                let (name, value) = line.split_once(':').unwrap_or_default();
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "x-idemgate-signature" => signature = value.trim().to_owned(),
                    _ => {}
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = r.read_exact(&mut body);
            let status = if n == 0 {
                "500 Internal Server Error"
            } else {
                "200 OK"
            };
            let _ = conn.write_all(
                format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
            );
            if tx.send((signature, body)).is_err() {
                return;
            }
        }
    });
    (url, rx)
}
