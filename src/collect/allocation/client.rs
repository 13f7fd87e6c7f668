//! A node's side of the rendezvous: reach rank 0 (retrying until the deadline: the engine
//! starts the ranks in any order, and a Kubernetes headless service's name resolves only once
//! rank 0's pod is up), join with the job's secret, and check that the answer is rank 0's own
//! (its welcome is authenticated under the session key only the secret's holder can derive).

use super::engine::Identity;
use super::wire::{self, Half, Message};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A joined session: read commands from rank 0, write through the shared half.
pub struct Session {
    pub reader: Half,
    pub writer: Arc<Mutex<Half>>,
    pub peer: String,
}

impl Session {
    /// Send one message within `timeout`.
    pub fn send(&self, m: &Message, timeout: Duration) -> Result<(), String> {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        w.send(m, Instant::now() + timeout)
            .map_err(|e| e.to_string())
    }
}

fn connect(addr: &str, until: Instant) -> Result<TcpStream, String> {
    let mut last = String::from("no attempt");
    loop {
        match addr.to_socket_addrs() {
            Ok(list) => {
                for a in list {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match TcpStream::connect_timeout(&a, left.min(Duration::from_secs(2))) {
                        Ok(s) => return Ok(s),
                        Err(e) => last = format!("{a}: {e}"),
                    }
                }
            }
            Err(e) => last = format!("{addr}: {e}"),
        }
        if Instant::now() + Duration::from_millis(200) >= until {
            return Err(format!(
                "rank 0 at {addr} could not be reached in time ({last})"
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Join rank 0 at `addr` before `until`.
pub fn join(addr: &str, id: &Identity, secret: &[u8], until: Instant) -> Result<Session, String> {
    let mut s = connect(addr, until)?;
    let _ = s.set_nodelay(true);
    let peer = format!("rank 0 at {addr}");
    let deadline =
        (Instant::now() + wire::HANDSHAKE).min(until.max(Instant::now() + Duration::from_secs(1)));
    let (_, body) = wire::read_frame(&mut s, wire::MAX_UNAUTHENTICATED, deadline, &peer, "hello")
        .map_err(|e| e.to_string())?;
    let (proto, nonce_s) = match wire::decode(&body, &peer).map_err(|e| e.to_string())? {
        Message::Hello { proto, nonce } => (proto, nonce),
        Message::Refused { reason } => {
            return Err(format!("{peer} refused the connection: {reason}"))
        }
        m => return Err(format!("{peer} said `{}` where a hello was due", m.kind())),
    };
    if proto != wire::PROTO {
        return Err(format!("{peer} speaks protocol {proto}; this gdrdoctor speaks {} (the same gdrdoctor on every node, please)", wire::PROTO));
    }
    let nonce_s = wire::unhex(&nonce_s)
        .filter(|n| n.len() == 32)
        .ok_or_else(|| format!("{peer}: a hello without a 32-byte nonce"))?;
    let nonce_c = wire::nonce()?;
    let join = Message::Join {
        proto: wire::PROTO,
        rank: id.rank,
        world: id.world,
        node: id.node.clone(),
        pid: std::process::id(),
        nonce: wire::hex(&nonce_c),
    };
    wire::send_keyed(
        &mut s,
        &join,
        secret,
        &wire::join_label(&nonce_s),
        0,
        deadline,
        &peer,
    )
    .map_err(|e| e.to_string())?;
    let key = wire::session_key(secret, &nonce_s, &nonce_c);
    let (tag, body) = wire::read_frame(
        &mut s,
        wire::MAX_UNAUTHENTICATED,
        deadline,
        &peer,
        "welcome",
    )
    .map_err(|e| e.to_string())?;
    if !wire::verify(&key, wire::TO_CLIENT, 0, &body, &tag) {
        // Not under the session key: a refusal (its reason is unauthenticated, shown as
        // such), or not this job's rank 0.
        return Err(match wire::decode(&body, &peer) {
            Ok(Message::Refused { reason }) => {
                format!("{peer} refused this rank (unauthenticated reply): {reason}")
            }
            _ => format!("{peer} did not answer under the job's secret: it is not this job's rank 0, or it holds another secret file"),
        });
    }
    match wire::decode(&body, &peer).map_err(|e| e.to_string())? {
        Message::Welcome { .. } => {}
        m => {
            return Err(format!(
                "{peer} said `{}` where a welcome was due",
                m.kind()
            ))
        }
    }
    let rs = s.try_clone().map_err(|e| format!("{peer}: {e}"))?;
    let reader = Half::new(rs, key.clone(), wire::TO_CLIENT, 1, &peer);
    let writer = Half::new(s, key, wire::TO_SERVER, 0, &peer);
    Ok(Session {
        reader,
        writer: Arc::new(Mutex::new(writer)),
        peer,
    })
}
