//! The rendezvous' wire: length-prefixed frames over TCP, each authenticated with HMAC-SHA256
//! under the job's secret, carrying one JSON [`Message`].
//!
//! ```text
//! frame = length (u32, big-endian) | mac (32 bytes) | body (length bytes of JSON)
//! ```
//!
//! The handshake (rank 0 serves, every other rank connects):
//!
//! 1. server -> client `hello {proto, nonce_s}`: not authenticated (the server knows nothing
//!    of the client yet); 32 random bytes from the OS.
//! 2. client -> server `join {rank, world, node, nonce_c}`, its mac
//!    `HMAC(secret, "join" | nonce_s | 0 | body)`: only a holder of the secret can make it, and
//!    it is bound to this connection's `nonce_s`, so a join recorded elsewhere is refused.
//! 3. both derive the session key `HMAC(secret, "session" | nonce_s | nonce_c)`; server ->
//!    client `welcome` under it: the client knows it reached the job's own rank 0.
//! 4. every later frame's mac is `HMAC(session, direction | seq | body)`, with a per-direction
//!    sequence number counted by both ends: a frame replayed, reordered, altered or moved to
//!    another connection fails its mac.
//!
//! Every read is bounded twice: in size (the length is checked against the cap before a byte
//! of the body is read: [`MAX_FRAME`] for a session's frames, [`MAX_UNAUTHENTICATED`] before
//! the join is verified, so a stranger cannot make rank 0 allocate) and in time (a deadline for
//! the whole frame, re-armed as the socket's timeout before every read: a peer that trickles a
//! byte at a time still meets it).

use gdrdoctor_checks::preflight::model::{NodeRun, RunSpec};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The protocol version; a peer speaking another is refused.
pub const PROTO: u32 = 1;
/// The largest frame of a session (a node's report is a few hundred KiB for 8 GPUs).
pub const MAX_FRAME: usize = 4 << 20;
/// The largest frame before the join is verified.
pub const MAX_UNAUTHENTICATED: usize = 4096;
/// How long a handshake may take.
pub const HANDSHAKE: Duration = Duration::from_secs(10);

const MAC_LEN: usize = 32;
const NONCE_LEN: usize = 32;
type HmacSha256 = Hmac<Sha256>;

/// What goes over the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Message {
    /// Server, first: the protocol and this connection's nonce (hex).
    Hello { proto: u32, nonce: String },
    /// Client: who it is.
    Join {
        proto: u32,
        rank: u32,
        world: u32,
        node: String,
        pid: u32,
        nonce: String,
    },
    /// Server: the join is accepted (authenticated under the session key).
    Welcome { world: u32 },
    /// Server: the join is refused, with why (not authenticated: nothing is trusted yet).
    Refused { reason: String },
    /// Client: its `check` report (JSON text), or why there is none; the GPUs it brings.
    Report {
        report: Option<String>,
        error: Option<String>,
        gpus: u32,
        check_ms: f64,
    },
    /// Server: run NCCL with this spec within `deadline_ms`.
    Nccl { spec: RunSpec, deadline_ms: u64 },
    /// Client: the `ncclUniqueId` its worker made, for the other nodes.
    NcclId { label: String, id: String },
    /// Client: its part of the run.
    NcclDone { label: String, run: Box<NodeRun> },
    /// Server: the answer is in; exit with this code.
    Done { exit_code: i32, line: String },
}

impl Message {
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "hello",
            Message::Join { .. } => "join",
            Message::Welcome { .. } => "welcome",
            Message::Refused { .. } => "refused",
            Message::Report { .. } => "report",
            Message::Nccl { .. } => "nccl",
            Message::NcclId { .. } => "nccl-id",
            Message::NcclDone { .. } => "nccl-done",
            Message::Done { .. } => "done",
        }
    }
}

/// What went wrong on the wire, naming the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The peer closed the connection.
    Closed {
        peer: String,
    },
    /// No whole frame within the deadline.
    Timeout {
        peer: String,
        what: String,
    },
    Io {
        peer: String,
        detail: String,
    },
    /// A frame longer than the cap: refused unread.
    TooBig {
        peer: String,
        len: usize,
        cap: usize,
    },
    /// The mac does not verify: another secret, or a replayed, reordered or altered frame.
    BadMac {
        peer: String,
    },
    /// The body is not a message of this protocol.
    Malformed {
        peer: String,
        detail: String,
    },
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Closed { peer } => write!(f, "{peer} closed the connection"),
            WireError::Timeout { peer, what } => write!(f, "{peer}: no {what} in time"),
            WireError::Io { peer, detail } => write!(f, "{peer}: {detail}"),
            WireError::TooBig { peer, len, cap } => write!(
                f,
                "{peer} sent a frame of {len} bytes, above the {} cap: refused unread",
                human(*cap)
            ),
            WireError::BadMac { peer } => write!(
                f,
                "{peer}: authentication failed (not the job's secret, or a replayed or altered frame)"
            ),
            WireError::Malformed { peer, detail } => {
                write!(f, "{peer} sent a malformed message: {detail}")
            }
        }
    }
}

fn human(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n}-byte")
    }
}

/// Fresh random bytes from the OS (a nonce); an error rather than a predictable one.
pub fn nonce() -> Result<[u8; NONCE_LEN], String> {
    let mut b = [0u8; NONCE_LEN];
    getrandom::fill(&mut b).map_err(|e| format!("no random numbers from the OS: {e}"))?;
    Ok(b)
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

fn mac(key: &[u8], label: &[u8], seq: u64, body: &[u8]) -> [u8; MAC_LEN] {
    // HMAC takes a key of any length.
    let mut m = match <HmacSha256 as Mac>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return [0u8; MAC_LEN],
    };
    m.update(label);
    m.update(&seq.to_be_bytes());
    m.update(body);
    m.finalize().into_bytes().into()
}

pub fn verify(key: &[u8], label: &[u8], seq: u64, body: &[u8], tag: &[u8]) -> bool {
    let Ok(mut m) = <HmacSha256 as Mac>::new_from_slice(key) else {
        return false;
    };
    m.update(label);
    m.update(&seq.to_be_bytes());
    m.update(body);
    // Constant time.
    m.verify_slice(tag).is_ok()
}

/// The session key of a connection.
pub fn session_key(secret: &[u8], nonce_s: &[u8], nonce_c: &[u8]) -> Vec<u8> {
    let mut l = b"session".to_vec();
    l.extend_from_slice(nonce_s);
    l.extend_from_slice(nonce_c);
    mac(secret, &l, 0, b"").to_vec()
}

/// The label a join's mac is bound to.
pub fn join_label(nonce_s: &[u8]) -> Vec<u8> {
    let mut l = b"join".to_vec();
    l.extend_from_slice(nonce_s);
    l
}

/// Read exactly `buf.len()` bytes before `deadline`.
fn read_full(
    s: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
    peer: &str,
    what: &str,
) -> Result<(), WireError> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WireError::Timeout {
                peer: peer.into(),
                what: what.into(),
            });
        }
        let _ = s.set_read_timeout(Some(left.max(Duration::from_millis(1))));
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(WireError::Closed { peer: peer.into() }),
            Ok(n) => got += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                return Err(WireError::Io {
                    peer: peer.into(),
                    detail: e.to_string(),
                })
            }
        }
    }
    Ok(())
}

/// One frame's raw parts, its length checked against `cap` before the body is read.
pub fn read_frame(
    s: &mut TcpStream,
    cap: usize,
    deadline: Instant,
    peer: &str,
    what: &str,
) -> Result<([u8; MAC_LEN], Vec<u8>), WireError> {
    let mut head = [0u8; 4 + MAC_LEN];
    read_full(s, &mut head, deadline, peer, what)?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len > cap {
        return Err(WireError::TooBig {
            peer: peer.into(),
            len,
            cap,
        });
    }
    let mut tag = [0u8; MAC_LEN];
    tag.copy_from_slice(&head[4..]);
    let mut body = vec![0u8; len];
    read_full(s, &mut body, deadline, peer, what)?;
    Ok((tag, body))
}

/// Write one frame before `deadline`.
pub fn write_frame(
    s: &mut TcpStream,
    tag: &[u8; MAC_LEN],
    body: &[u8],
    deadline: Instant,
    peer: &str,
) -> Result<(), WireError> {
    let len = u32::try_from(body.len()).map_err(|_| WireError::TooBig {
        peer: peer.into(),
        len: body.len(),
        cap: MAX_FRAME,
    })?;
    let mut frame = Vec::with_capacity(4 + MAC_LEN + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(tag);
    frame.extend_from_slice(body);
    let mut sent = 0;
    while sent < frame.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WireError::Timeout {
                peer: peer.into(),
                what: "write".into(),
            });
        }
        let _ = s.set_write_timeout(Some(left.max(Duration::from_millis(1))));
        match s.write(&frame[sent..]) {
            Ok(0) => return Err(WireError::Closed { peer: peer.into() }),
            Ok(n) => sent += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                return Err(WireError::Io {
                    peer: peer.into(),
                    detail: e.to_string(),
                })
            }
        }
    }
    Ok(())
}

pub fn decode(body: &[u8], peer: &str) -> Result<Message, WireError> {
    serde_json::from_slice(body).map_err(|e| WireError::Malformed {
        peer: peer.into(),
        detail: e.to_string(),
    })
}

pub fn encode(m: &Message, peer: &str) -> Result<Vec<u8>, WireError> {
    serde_json::to_vec(m).map_err(|e| WireError::Malformed {
        peer: peer.into(),
        detail: e.to_string(),
    })
}

/// Send a frame that is not authenticated (`hello`, `refused`).
pub fn send_plain(
    s: &mut TcpStream,
    m: &Message,
    deadline: Instant,
    peer: &str,
) -> Result<(), WireError> {
    let body = encode(m, peer)?;
    write_frame(s, &[0u8; MAC_LEN], &body, deadline, peer)
}

/// Send a frame authenticated under `key` with `label` and `seq` (the join).
pub fn send_keyed(
    s: &mut TcpStream,
    m: &Message,
    key: &[u8],
    label: &[u8],
    seq: u64,
    deadline: Instant,
    peer: &str,
) -> Result<(), WireError> {
    let body = encode(m, peer)?;
    if body.len() > MAX_FRAME {
        return Err(WireError::TooBig {
            peer: peer.into(),
            len: body.len(),
            cap: MAX_FRAME,
        });
    }
    write_frame(s, &mac(key, label, seq, &body), &body, deadline, peer)
}

/// Read a frame authenticated under `key`, `label`, `seq`.
#[allow(clippy::too_many_arguments)]
pub fn recv_keyed(
    s: &mut TcpStream,
    key: &[u8],
    label: &[u8],
    seq: u64,
    cap: usize,
    deadline: Instant,
    peer: &str,
    what: &str,
) -> Result<Message, WireError> {
    let (tag, body) = read_frame(s, cap, deadline, peer, what)?;
    if !verify(key, label, seq, &body, &tag) {
        return Err(WireError::BadMac { peer: peer.into() });
    }
    decode(&body, peer)
}

/// One direction of an authenticated session: the key, the direction's label and its count.
#[derive(Debug)]
pub struct Half {
    pub stream: TcpStream,
    key: Vec<u8>,
    label: &'static [u8],
    seq: u64,
    pub peer: String,
}

impl Half {
    pub fn new(
        stream: TcpStream,
        key: Vec<u8>,
        label: &'static [u8],
        first_seq: u64,
        peer: &str,
    ) -> Half {
        Half {
            stream,
            key,
            label,
            seq: first_seq,
            peer: peer.to_string(),
        }
    }

    pub fn send(&mut self, m: &Message, deadline: Instant) -> Result<(), WireError> {
        let r = send_keyed(
            &mut self.stream,
            m,
            &self.key,
            self.label,
            self.seq,
            deadline,
            &self.peer,
        );
        self.seq += 1;
        r
    }

    pub fn recv(
        &mut self,
        cap: usize,
        deadline: Instant,
        what: &str,
    ) -> Result<Message, WireError> {
        let r = recv_keyed(
            &mut self.stream,
            &self.key,
            self.label,
            self.seq,
            cap,
            deadline,
            &self.peer,
            what,
        );
        self.seq += 1;
        r
    }
}

/// The direction labels.
pub const TO_CLIENT: &[u8] = b"rank0->rank";
pub const TO_SERVER: &[u8] = b"rank->rank0";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn macs_bind_key_label_sequence_and_body() {
        let t = mac(b"secret", b"l", 3, b"body");
        assert!(verify(b"secret", b"l", 3, b"body", &t));
        assert!(!verify(b"other", b"l", 3, b"body", &t));
        assert!(!verify(b"secret", b"m", 3, b"body", &t));
        assert!(!verify(b"secret", b"l", 4, b"body", &t));
        assert!(!verify(b"secret", b"l", 3, b"bodz", &t));
        assert!(!verify(b"secret", b"l", 3, b"body", &t[..31]));
    }

    #[test]
    fn hex_round_trips_and_refuses_garbage() {
        assert_eq!(unhex(&hex(&[0, 1, 254, 255])), Some(vec![0, 1, 254, 255]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("é1"), None);
    }

    #[test]
    fn a_frame_over_the_cap_is_refused_before_its_body() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            // Claims 5 MiB, sends nothing more.
            c.write_all(&((5u32 << 20).to_be_bytes())).unwrap();
            c.write_all(&[0u8; 32]).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        let (mut s, _) = l.accept().unwrap();
        let e = read_frame(
            &mut s,
            MAX_FRAME,
            Instant::now() + Duration::from_secs(5),
            "p",
            "x",
        )
        .unwrap_err();
        assert!(
            matches!(e, WireError::TooBig { len, .. } if len == 5 << 20),
            "{e}"
        );
        t.join().unwrap();
    }

    #[test]
    fn a_trickling_peer_meets_the_deadline() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            for _ in 0..20 {
                if c.write_all(&[0u8]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let (mut s, _) = l.accept().unwrap();
        let t0 = Instant::now();
        let e = read_frame(&mut s, 64, t0 + Duration::from_millis(500), "p", "x").unwrap_err();
        assert!(matches!(e, WireError::Timeout { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_millis(1500));
        drop(s);
        t.join().unwrap();
    }
}
