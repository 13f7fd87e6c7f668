//! Rank 0's side of the rendezvous: listen, and for every connection run the handshake
//! ([`super::wire`]) on a thread of its own, so that a stranger who connects and says nothing
//! holds up no one; then turn every frame into an [`Event`] for the coordinator, stamped with
//! when it came. A stranger's connection (no join, a bad mac, another protocol, a rank already
//! joined, a rank outside the world) is refused with the reason and counted.

use super::wire::{self, Half, Message, WireError};
use gdrdoctor_checks::preflight::model::Refusal;
use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections in their handshake at once; more are refused at once (a flood of strangers).
const MAX_PENDING: usize = 1024;

/// The write half of a member's session, shared by the coordinator.
pub type Writer = Arc<Mutex<Half>>;

/// What happened at the rendezvous.
pub enum Event {
    Joined {
        rank: u32,
        node: String,
        peer: String,
        writer: Writer,
    },
    Message {
        rank: u32,
        msg: Box<Message>,
    },
    /// A member's frame was refused (too big, malformed); its connection is closed.
    FrameRefused {
        rank: u32,
        why: String,
    },
    /// A member's connection ended.
    Lost {
        rank: u32,
        why: String,
    },
    Refused(Refusal),
}

pub struct Server {
    pub addr: SocketAddr,
    pub events: Receiver<(Instant, Event)>,
    stop: Arc<AtomicBool>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Listen on `bind` (`0.0.0.0:PORT`) for the members of a world of `world` ranks, until
/// dropped or `until`.
pub fn serve(bind: &str, secret: Vec<u8>, world: u32, until: Instant) -> Result<Server, String> {
    let listener = TcpListener::bind(bind)
        .map_err(|e| format!("rank 0 cannot listen on {bind}: {e} (another preflight on this port? give --rendezvous HOST:PORT with a free port)"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("rank 0's listener on {bind}: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("rank 0's listener on {bind}: {e}"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let secret = Arc::new(secret);
    let joined: Arc<Mutex<BTreeSet<u32>>> = Arc::default();
    let pending = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("preflight-accept".into())
        .spawn(move || {
            while !stop2.load(Ordering::SeqCst) && Instant::now() < until {
                match listener.accept() {
                    Ok((s, peer)) => {
                        let peer = peer.to_string();
                        if pending.load(Ordering::SeqCst) >= MAX_PENDING {
                            let _ = tx.send((
                                Instant::now(),
                                Event::Refused(Refusal {
                                    peer,
                                    reason: format!(
                                        "more than {MAX_PENDING} connections in their handshake"
                                    ),
                                }),
                            ));
                            continue;
                        }
                        pending.fetch_add(1, Ordering::SeqCst);
                        let (tx, secret, joined, pending, stop) = (
                            tx.clone(),
                            Arc::clone(&secret),
                            Arc::clone(&joined),
                            Arc::clone(&pending),
                            Arc::clone(&stop2),
                        );
                        let spawned = std::thread::Builder::new()
                            .name("preflight-conn".into())
                            .spawn(move || {
                                handle(
                                    s, &peer, &secret, world, &tx, &joined, &pending, &stop, until,
                                )
                            });
                        if spawned.is_err() {
                            // No thread for it: the connection drops with the closure.
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        })
        .map_err(|e| format!("rank 0 cannot start its listener thread: {e}"))?;
    Ok(Server {
        addr,
        events: rx,
        stop,
    })
}

fn refuse(s: &mut TcpStream, tx: &Sender<(Instant, Event)>, peer: &str, reason: String) {
    let _ = wire::send_plain(
        s,
        &Message::Refused {
            reason: reason.clone(),
        },
        Instant::now() + Duration::from_secs(1),
        peer,
    );
    let _ = tx.send((
        Instant::now(),
        Event::Refused(Refusal {
            peer: peer.to_string(),
            reason,
        }),
    ));
}

#[allow(clippy::too_many_arguments)]
fn handle(
    mut s: TcpStream,
    peer: &str,
    secret: &[u8],
    world: u32,
    tx: &Sender<(Instant, Event)>,
    joined: &Mutex<BTreeSet<u32>>,
    pending: &AtomicUsize,
    stop: &AtomicBool,
    until: Instant,
) {
    let hs = handshake(&mut s, peer, secret, world, tx, joined);
    pending.fetch_sub(1, Ordering::SeqCst);
    let Some((rank, mut reader)) = hs else {
        let _ = s.shutdown(std::net::Shutdown::Both);
        return;
    };
    loop {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        // Read in slices of at most a second, so that a stopped server lets go.
        let deadline = until.min(Instant::now() + Duration::from_secs(3600));
        match reader.recv(wire::MAX_FRAME, deadline, "message") {
            Ok(m) => {
                if tx
                    .send((
                        Instant::now(),
                        Event::Message {
                            rank,
                            msg: Box::new(m),
                        },
                    ))
                    .is_err()
                {
                    return;
                }
            }
            Err(e @ (WireError::TooBig { .. } | WireError::Malformed { .. })) => {
                let _ = reader.stream.shutdown(std::net::Shutdown::Both);
                let _ = tx.send((
                    Instant::now(),
                    Event::FrameRefused {
                        rank,
                        why: e.to_string(),
                    },
                ));
                return;
            }
            Err(e) => {
                let _ = tx.send((
                    Instant::now(),
                    Event::Lost {
                        rank,
                        why: e.to_string(),
                    },
                ));
                return;
            }
        }
    }
}

fn handshake(
    s: &mut TcpStream,
    peer: &str,
    secret: &[u8],
    world: u32,
    tx: &Sender<(Instant, Event)>,
    joined: &Mutex<BTreeSet<u32>>,
) -> Option<(u32, Half)> {
    let _ = s.set_nodelay(true);
    let deadline = Instant::now() + wire::HANDSHAKE;
    let nonce_s = match wire::nonce() {
        Ok(n) => n,
        Err(e) => {
            refuse(s, tx, peer, e);
            return None;
        }
    };
    let hello = Message::Hello {
        proto: wire::PROTO,
        nonce: wire::hex(&nonce_s),
    };
    if wire::send_plain(s, &hello, deadline, peer).is_err() {
        let _ = tx.send((
            Instant::now(),
            Event::Refused(Refusal {
                peer: peer.into(),
                reason: "went away before the handshake".into(),
            }),
        ));
        return None;
    }
    let frame = wire::read_frame(s, wire::MAX_UNAUTHENTICATED, deadline, peer, "join");
    let (tag, body) = match frame {
        Ok(f) => f,
        Err(WireError::TooBig { len, .. }) => {
            refuse(
                s,
                tx,
                peer,
                format!("a first frame of {len} bytes, not a join"),
            );
            return None;
        }
        Err(e) => {
            refuse(s, tx, peer, format!("no join: {e}"));
            return None;
        }
    };
    let label = wire::join_label(&nonce_s);
    // The mac first: nothing of an unauthenticated body is read.
    let check = wire::verify(secret, &label, 0, &body, &tag);
    if !check {
        refuse(
            s,
            tx,
            peer,
            "authentication failed: the join is not signed with the job's secret (a stranger, another job, or a replay)".into(),
        );
        return None;
    }
    let m = match wire::decode(&body, peer) {
        Ok(m) => m,
        Err(e) => {
            refuse(s, tx, peer, e.to_string());
            return None;
        }
    };
    let Message::Join {
        proto,
        rank,
        world: w,
        node,
        nonce,
        ..
    } = m
    else {
        refuse(
            s,
            tx,
            peer,
            format!("a `{}` where a join was due", m.kind()),
        );
        return None;
    };
    if proto != wire::PROTO {
        refuse(
            s,
            tx,
            peer,
            format!("protocol {proto}; rank 0 speaks {}", wire::PROTO),
        );
        return None;
    }
    if w != world || rank >= world {
        refuse(
            s,
            tx,
            peer,
            format!("rank {rank} of a world of {w}; rank 0 serves a world of {world}"),
        );
        return None;
    }
    let Some(nonce_c) = wire::unhex(&nonce).filter(|n| n.len() == 32) else {
        refuse(s, tx, peer, "a join without a 32-byte nonce".into());
        return None;
    };
    {
        let mut j = joined.lock().unwrap_or_else(|e| e.into_inner());
        if !j.insert(rank) {
            drop(j);
            refuse(s, tx, peer, format!("rank {rank} has already joined"));
            return None;
        }
    }
    let key = wire::session_key(secret, &nonce_s, &nonce_c);
    let (ws, rs) = match s.try_clone() {
        Ok(w) => (w, s.try_clone()),
        Err(e) => {
            let _ = tx.send((
                Instant::now(),
                Event::Lost {
                    rank,
                    why: e.to_string(),
                },
            ));
            return None;
        }
    };
    let Ok(rs) = rs else {
        let _ = tx.send((
            Instant::now(),
            Event::Lost {
                rank,
                why: "cannot clone the socket".into(),
            },
        ));
        return None;
    };
    let mut writer = Half::new(ws, key.clone(), wire::TO_CLIENT, 0, peer);
    if let Err(e) = writer.send(&Message::Welcome { world }, deadline) {
        let _ = tx.send((
            Instant::now(),
            Event::Lost {
                rank,
                why: e.to_string(),
            },
        ));
        return None;
    }
    let _ = tx.send((
        Instant::now(),
        Event::Joined {
            rank,
            node,
            peer: peer.to_string(),
            writer: Arc::new(Mutex::new(writer)),
        },
    ));
    Some((rank, Half::new(rs, key, wire::TO_SERVER, 0, peer)))
}
