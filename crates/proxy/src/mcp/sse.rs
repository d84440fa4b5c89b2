//! Server-sent events as an MCP server streams them: cut into whole events as bytes arrive, each
//! kept as it came (to pass on unchanged) with its `data` joined (to read the message in it).

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame};
use tokio::sync::mpsc;

/// The longest event kept whole: beyond it the stream is not one idemgate can read.
pub const MAX_EVENT: usize = idemgate_ledger::MAX_RESPONSE_BODY;

/// One event: its bytes as they came (through the blank line that ends it) and its data lines
/// joined by `\n` (`None`: a comment or an event with no data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub raw: Bytes,
    pub data: Option<String>,
}

/// Cuts a stream into events (the WHATWG event-stream format: lines ended by CRLF, LF or CR, an
/// event ended by a blank line).
#[derive(Debug, Default)]
pub struct Parser {
    /// The bytes since the last event ended.
    buf: BytesMut,
    /// Where the current line starts in `buf`.
    line: usize,
    /// The current event has a line.
    open: bool,
    data: Option<String>,
    /// The last line ended with a CR: an LF right after it is part of that line ending.
    after_cr: bool,
}

/// An event longer than [`MAX_EVENT`].
#[derive(Debug, PartialEq, Eq)]
pub struct TooLong;

impl Parser {
    /// Takes `chunk`; the events it completes.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Event>, TooLong> {
        let mut out = Vec::new();
        let mut i = self.buf.len();
        self.buf.extend_from_slice(chunk);
        while i < self.buf.len() {
            let b = self.buf[i];
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                self.line = i + 1;
                i += 1;
                continue;
            }
            if b == b'\n' || b == b'\r' {
                self.after_cr = b == b'\r';
                let blank = self.line == i;
                if !blank {
                    let line = String::from_utf8_lossy(&self.buf[self.line..i]).into_owned();
                    self.field(&line);
                    self.open = true;
                }
                self.line = i + 1;
                if blank && self.open {
                    let raw = self.buf.split_to(i + 1).freeze();
                    out.push(Event {
                        raw,
                        data: self.data.take(),
                    });
                    (self.line, self.open, i) = (0, false, 0);
                    continue;
                }
            }
            i += 1;
        }
        if self.buf.len() > MAX_EVENT {
            return Err(TooLong);
        }
        Ok(out)
    }

    /// What is left after the last whole event (at the end of a stream: nothing an event needs).
    #[cfg(test)]
    pub fn rest(&mut self) -> Bytes {
        self.line = 0;
        self.open = false;
        self.data = None;
        self.buf.split().freeze()
    }

    fn field(&mut self, line: &str) {
        let (name, value) = match line.split_once(':') {
            Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        if name == "data" {
            match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            }
        }
    }
}

/// Every event of a whole stream.
pub fn events(body: &[u8]) -> Vec<Event> {
    let mut p = Parser::default();
    let mut all = p.push(body).unwrap_or_default();
    // A last event without its blank line still counts once the stream has ended.
    all.extend(p.push(b"\n\n").unwrap_or_default());
    all
}

/// A stream's body: the events a call's task sends.
#[derive(Debug)]
pub struct EventBody {
    rx: mpsc::Receiver<Bytes>,
}

impl EventBody {
    pub(crate) fn new(rx: mpsc::Receiver<Bytes>) -> EventBody {
        EventBody { rx }
    }
}

impl Body for EventBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datas(evs: &[Event]) -> Vec<&str> {
        evs.iter().filter_map(|e| e.data.as_deref()).collect()
    }

    #[test]
    fn events_are_cut_at_blank_lines_whatever_the_line_endings() {
        for sep in ["\n", "\r\n", "\r"] {
            let text = format!(
                "event: message{sep}id: 1{sep}data: {{\"a\":1}}{sep}{sep}: comment{sep}{sep}data: x{sep}data: y{sep}{sep}"
            );
            let evs = events(text.as_bytes());
            assert_eq!(datas(&evs), ["{\"a\":1}", "x\ny"], "{sep:?}");
            assert_eq!(evs.len(), 3, "the comment is an event too, passed on");
            let raw: Vec<u8> = evs.iter().flat_map(|e| e.raw.to_vec()).collect();
            assert!(text.as_bytes().starts_with(&raw), "{sep:?}");
        }
    }

    #[test]
    fn an_event_split_across_chunks_comes_out_once_whole() {
        let text = b"data: {\"jsonrpc\":\"2.0\"}\r\n\r\ndata: two\n\n";
        for cut in 0..text.len() {
            let mut p = Parser::default();
            let mut evs = p.push(&text[..cut]).expect("fits");
            evs.extend(p.push(&text[cut..]).expect("fits"));
            assert_eq!(
                datas(&evs),
                ["{\"jsonrpc\":\"2.0\"}", "two"],
                "cut at {cut}"
            );
            let mut raw: Vec<u8> = evs.iter().flat_map(|e| e.raw.to_vec()).collect();
            raw.extend_from_slice(&p.rest());
            assert_eq!(raw, text, "cut at {cut}: the bytes pass on unchanged");
        }
    }

    #[test]
    fn an_endless_event_is_refused() {
        let mut p = Parser::default();
        let big = vec![b'x'; MAX_EVENT + 1];
        assert_eq!(p.push(b"data: ").map(|v| v.len()), Ok(0));
        assert_eq!(p.push(&big), Err(TooLong));
    }
}
