//! SPDY/3.1 framing, as much as kubectl's port-forward needs (no maintained Rust crate
//! speaks SPDY). kubectl 1.32 tunnels SPDY in WebSocket binary messages
//! (`SPDY/3.1+portforward.k8s.io`); the messages together are the SPDY byte stream.
//!
//! Frames: a control frame starts with the control bit, version 3 and its type, then flags
//! (8 bits) and length (24 bits); a data frame with a 31-bit stream id, then flags (`FIN` is
//! bit 0) and length. Header blocks (SYN_STREAM, SYN_REPLY, HEADERS) are name/value lists
//! compressed with zlib, one stream per direction for the whole connection, primed with the
//! protocol's dictionary. Flow control (WINDOW_UPDATE, SETTINGS) is read and ignored:
//! kubectl's SPDY library enforces no windows.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

/// The largest frame accepted (kubectl sends at most 32 KiB of data per frame).
const MAX_FRAME: usize = 16 * 1024 * 1024;
/// The largest decompressed header block accepted.
const MAX_HEADER_BLOCK: usize = 64 * 1024;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;

/// `FLAG_FIN`: the sender's last frame on the stream.
pub const FIN: u8 = 1;
/// RST_STREAM status: the stream is not known (or already closed).
pub const INVALID_STREAM: u32 = 2;

/// Why the SPDY stream cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    #[error("SPDY frame of {0} bytes is too large")]
    TooLarge(usize),
    #[error("SPDY version {0} is not supported")]
    Version(u16),
    #[error("malformed SPDY frame: {0}")]
    Malformed(&'static str),
    #[error("SPDY header block: {0}")]
    Headers(String),
}

/// A frame read from the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream_id: u32,
        fin: bool,
        headers: Vec<(String, String)>,
    },
    RstStream {
        stream_id: u32,
    },
    Ping {
        id: u32,
    },
    GoAway,
    Data {
        stream_id: u32,
        fin: bool,
        data: Vec<u8>,
    },
    /// A frame that needs no answer (SETTINGS, WINDOW_UPDATE, HEADERS, SYN_REPLY, NOOP).
    Ignored,
}

/// SPDY/3's header compression dictionary: the length-prefixed names and values common in
/// HTTP, then a run of common header text (draft 3, section 2.6.10.1).
fn dictionary() -> Vec<u8> {
    const WORDS: [&str; 65] = [
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
        "200 OK",
        "version",
        "HTTP/1.1",
        "url",
        "public",
        "set-cookie",
        "keep-alive",
        "origin",
    ];
    const TAIL: &str = concat!(
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417",
        "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently",
        "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error",
        "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct ",
        "Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,",
        "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
        "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8",
        "charset=iso-8859-1,utf-,*,enq=0.",
    );
    let mut d = Vec::with_capacity(1423);
    for w in WORDS {
        d.extend_from_slice(&(w.len() as u32).to_be_bytes());
        d.extend_from_slice(w.as_bytes());
    }
    d.extend_from_slice(TAIL.as_bytes());
    d
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Reads frames from the client's byte stream.
pub struct Reader {
    buf: Vec<u8>,
    inflate: Decompress,
    dictionary: Vec<u8>,
}

impl Default for Reader {
    fn default() -> Self {
        Reader {
            buf: Vec::new(),
            inflate: Decompress::new(true),
            dictionary: dictionary(),
        }
    }
}

impl Reader {
    /// Adds bytes read from the connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame, if the buffer holds one.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, SpdyError> {
        if self.buf.len() < 8 {
            return Ok(None);
        }
        let flags = self.buf[4];
        let len = (be32(&self.buf[4..8]) & 0x00ff_ffff) as usize;
        if len > MAX_FRAME {
            return Err(SpdyError::TooLarge(len));
        }
        if self.buf.len() < 8 + len {
            return Ok(None);
        }
        let frame: Vec<u8> = self.buf.drain(..8 + len).collect();
        let body = &frame[8..];
        let fin = flags & FIN != 0;
        if frame[0] & 0x80 == 0 {
            return Ok(Some(Frame::Data {
                stream_id: be32(&frame[0..4]) & 0x7fff_ffff,
                fin,
                data: body.to_vec(),
            }));
        }
        let version = u16::from_be_bytes([frame[0] & 0x7f, frame[1]]);
        if version != 3 {
            return Err(SpdyError::Version(version));
        }
        let kind = u16::from_be_bytes([frame[2], frame[3]]);
        let stream_id = |b: &[u8]| -> Result<u32, SpdyError> {
            if b.len() < 4 {
                return Err(SpdyError::Malformed("short frame"));
            }
            Ok(be32(b) & 0x7fff_ffff)
        };
        Ok(Some(match kind {
            SYN_STREAM => {
                if body.len() < 10 {
                    return Err(SpdyError::Malformed("short SYN_STREAM"));
                }
                Frame::SynStream {
                    stream_id: stream_id(body)?,
                    fin,
                    headers: self.header_block(&body[10..])?,
                }
            }
            SYN_REPLY | 8 => {
                // Header blocks must still be inflated: the zlib stream is shared.
                if body.len() >= 4 {
                    self.header_block(&body[4..])?;
                }
                Frame::Ignored
            }
            RST_STREAM => Frame::RstStream {
                stream_id: stream_id(body)?,
            },
            PING => Frame::Ping {
                id: stream_id(body).map(|_| be32(body))?,
            },
            GOAWAY => Frame::GoAway,
            _ => Frame::Ignored,
        }))
    }

    /// Inflates and parses a name/value header block.
    fn header_block(&mut self, compressed: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
        let err = |e: &dyn std::fmt::Display| SpdyError::Headers(e.to_string());
        let mut out = Vec::with_capacity(1024);
        let mut input = compressed;
        loop {
            let before_in = self.inflate.total_in();
            if out.capacity() - out.len() < 256 {
                out.reserve(1024);
            }
            match self
                .inflate
                .decompress_vec(input, &mut out, FlushDecompress::Sync)
            {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate
                        .set_dictionary(&self.dictionary)
                        .map_err(|e| err(&e))?;
                }
                Err(e) => return Err(err(&e)),
            }
            let used = (self.inflate.total_in() - before_in) as usize;
            input = &input[used..];
            if out.len() > MAX_HEADER_BLOCK {
                return Err(SpdyError::Headers("header block too large".into()));
            }
            // Done when the input is used up and the inflater had room to spare.
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        parse_block(&out)
    }
}

fn parse_block(b: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    let bad = || SpdyError::Headers("truncated name/value block".into());
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], SpdyError> {
        // n is a 32-bit length off the wire: on a 32-bit agent at + n could overflow.
        let end = at.checked_add(n).ok_or_else(bad)?;
        let s = b.get(at..end).ok_or_else(bad)?;
        at = end;
        Ok(s)
    };
    let count = be32(take(4)?);
    let mut headers = Vec::new();
    for _ in 0..count {
        let n = be32(take(4)?) as usize;
        let name = String::from_utf8_lossy(take(n)?).into_owned();
        let n = be32(take(4)?) as usize;
        let value = String::from_utf8_lossy(take(n)?).into_owned();
        headers.push((name, value));
    }
    Ok(headers)
}

/// Writes frames to the client.
pub struct Writer {
    deflate: Compress,
}

impl Default for Writer {
    fn default() -> Self {
        let mut deflate = Compress::new(Compression::default(), true);
        // A fresh compressor takes a dictionary before its first output.
        let _ = deflate.set_dictionary(&dictionary());
        Writer { deflate }
    }
}

fn control(kind: u16, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + body.len());
    f.extend_from_slice(&[0x80, 3]);
    f.extend_from_slice(&kind.to_be_bytes());
    f.extend_from_slice(&((u32::from(flags) << 24) | body.len() as u32).to_be_bytes());
    f.extend_from_slice(body);
    f
}

impl Writer {
    /// SYN_REPLY accepting `stream_id`, with no headers.
    pub fn syn_reply(&mut self, stream_id: u32) -> Vec<u8> {
        let mut body = stream_id.to_be_bytes().to_vec();
        // An empty name/value block: a count of zero.
        let block = 0u32.to_be_bytes();
        let mut out = Vec::with_capacity(64);
        let mut input = &block[..];
        loop {
            let before = self.deflate.total_in();
            out.reserve(64);
            if self
                .deflate
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .is_err()
            {
                break;
            }
            input = &input[(self.deflate.total_in() - before) as usize..];
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        body.extend_from_slice(&out);
        control(SYN_REPLY, 0, &body)
    }

    /// A data frame (`fin` closes the server's side of the stream).
    pub fn data(stream_id: u32, fin: bool, data: &[u8]) -> Vec<u8> {
        let mut f = Vec::with_capacity(8 + data.len());
        f.extend_from_slice(&(stream_id & 0x7fff_ffff).to_be_bytes());
        let flags = if fin { u32::from(FIN) } else { 0 };
        f.extend_from_slice(&((flags << 24) | data.len() as u32).to_be_bytes());
        f.extend_from_slice(data);
        f
    }

    /// The answer to a PING.
    pub fn ping(id: u32) -> Vec<u8> {
        control(PING, 0, &id.to_be_bytes())
    }

    /// RST_STREAM for a stream.
    pub fn rst_stream(stream_id: u32, status: u32) -> Vec<u8> {
        let mut body = stream_id.to_be_bytes().to_vec();
        body.extend_from_slice(&status.to_be_bytes());
        control(RST_STREAM, 0, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_is_spdy3s() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        // The dictionary id zlib puts in streams primed with it (Adler-32).
        let mut a: u32 = 1;
        let mut b: u32 = 0;
        for &x in &d {
            a = (a + u32::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, 0xe3c6_a7c2);
    }

    /// A client's SYN_STREAM, compressed the way SPDY clients do (with the dictionary),
    /// comes back as its headers; our SYN_REPLY and DATA frames parse back.
    /// Lengths off the wire up to 2^32 - 1: refused as truncated, never an overflow.
    #[test]
    fn header_blocks_with_the_largest_lengths_are_refused() {
        let mut block = 1u32.to_be_bytes().to_vec();
        block.extend_from_slice(&u32::MAX.to_be_bytes());
        block.extend_from_slice(b"name");
        assert!(parse_block(&block).is_err());
        let mut block = u32::MAX.to_be_bytes().to_vec();
        block.extend_from_slice(&0u32.to_be_bytes());
        block.extend_from_slice(&0u32.to_be_bytes());
        assert!(parse_block(&block).is_err());
    }

    #[test]
    fn frames_round_trip() {
        let mut block = Vec::new();
        let pairs = [("streamtype", "data"), ("port", "8080"), ("requestid", "0")];
        block.extend_from_slice(&(pairs.len() as u32).to_be_bytes());
        for (k, v) in pairs {
            block.extend_from_slice(&(k.len() as u32).to_be_bytes());
            block.extend_from_slice(k.as_bytes());
            block.extend_from_slice(&(v.len() as u32).to_be_bytes());
            block.extend_from_slice(v.as_bytes());
        }
        let mut z = Compress::new(Compression::best(), true);
        z.set_dictionary(&dictionary()).expect("dictionary");
        let mut compressed = Vec::with_capacity(1024);
        z.compress_vec(&block, &mut compressed, FlushCompress::Sync)
            .expect("compress");
        let mut body = 3u32.to_be_bytes().to_vec();
        body.extend_from_slice(&0u32.to_be_bytes());
        body.extend_from_slice(&[0, 0]);
        body.extend_from_slice(&compressed);
        let syn = control(SYN_STREAM, 0, &body);

        let mut r = Reader::default();
        r.push(&syn[..5]);
        assert_eq!(r.next_frame().expect("partial"), None);
        r.push(&syn[5..]);
        r.push(&Writer::data(3, true, b"hi"));
        r.push(&Writer::ping(7));
        match r.next_frame().expect("syn") {
            Some(Frame::SynStream {
                stream_id, headers, ..
            }) => {
                assert_eq!(stream_id, 3);
                assert_eq!(headers[0], ("streamtype".into(), "data".into()));
                assert_eq!(headers[1], ("port".into(), "8080".into()));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            r.next_frame().expect("data"),
            Some(Frame::Data {
                stream_id: 3,
                fin: true,
                data: b"hi".to_vec()
            })
        );
        assert_eq!(r.next_frame().expect("ping"), Some(Frame::Ping { id: 7 }));

        // Our SYN_REPLY's header block inflates with the dictionary.
        let mut w = Writer::default();
        let reply = w.syn_reply(3);
        assert_eq!(&reply[..4], &[0x80, 3, 0, 2]);
        let mut d = Decompress::new(true);
        let mut out = Vec::with_capacity(64);
        let input = &reply[12..];
        let e = d
            .decompress_vec(input, &mut out, FlushDecompress::Sync)
            .expect_err("needs the dictionary");
        assert!(e.needs_dictionary().is_some());
        d.set_dictionary(&dictionary()).expect("dictionary");
        let used = d.total_in() as usize;
        d.decompress_vec(&input[used..], &mut out, FlushDecompress::Sync)
            .expect("inflate");
        assert_eq!(out, 0u32.to_be_bytes());
    }
}
