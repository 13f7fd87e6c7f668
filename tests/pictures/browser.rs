//! A headless Chromium driven over the DevTools protocol, for the picture tests: open a file,
//! evaluate JavaScript in it, move the mouse, take screenshots, and collect every console error
//! and uncaught exception.
//!
//! Chromium runs with `--remote-debugging-pipe`: it reads NUL-terminated JSON commands on fd 3
//! and writes responses and events on fd 4 (what Playwright and Puppeteer use), so no port, no
//! WebSocket and no crate beyond serde_json. Each browser gets a new empty profile directory and
//! flags that keep it off the network.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// Where Debian's `chromium` package puts the browser (`GDRDOCTOR_CHROMIUM` overrides).
pub fn chromium() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("GDRDOCTOR_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

pub struct Browser {
    child: Child,
    to: std::fs::File,
    rx: Receiver<Value>,
    next: u64,
    session: String,
    /// Console errors, uncaught exceptions and error log entries seen so far.
    pub errors: Vec<String>,
    _profile: tempfile::TempDir,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array; both are owned below.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: the fds were just created and are not owned elsewhere.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Browser {
    /// Start Chromium with a `width` x `height` viewport.
    pub fn start(exe: &Path, width: u32, height: u32) -> Browser {
        use std::os::fd::AsRawFd;
        let profile = tempfile::tempdir().unwrap();
        let (cmd_r, cmd_w) = pipe();
        let (ev_r, ev_w) = pipe();
        let (r3, w4) = (cmd_r.as_raw_fd(), ev_w.as_raw_fd());
        let mut c = Command::new(exe);
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--mute-audio",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={width},{height}"))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec. The pipe
        // ends are first moved above 3 and 4 (they may be 3 or 4 themselves, and dup2 onto the
        // same number would keep close-on-exec), then put on 3 and 4 without close-on-exec.
        unsafe {
            c.pre_exec(move || {
                let a = libc::fcntl(r3, libc::F_DUPFD_CLOEXEC, 10);
                let b = libc::fcntl(w4, libc::F_DUPFD_CLOEXEC, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = c.spawn().unwrap();
        drop(cmd_r);
        drop(ev_w);
        let to = std::fs::File::from(cmd_w);
        let from = std::fs::File::from(ev_r);
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(from);
            loop {
                let mut buf = Vec::new();
                match r.read_until(0, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if buf.last() == Some(&0) {
                            buf.pop();
                        }
                        if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                            if tx.send(v).is_err() {
                                break;
                            }
                        }
                    }
                }
            }
        });
        let mut b = Browser {
            child,
            to,
            rx,
            next: 0,
            session: String::new(),
            errors: Vec::new(),
            _profile: profile,
        };
        let t = b.call_browser("Target.createTarget", json!({"url": "about:blank"}));
        let target = t["targetId"].as_str().unwrap().to_string();
        let s = b.call_browser(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        b.session = s["sessionId"].as_str().unwrap().to_string();
        for m in ["Page.enable", "Runtime.enable", "Log.enable"] {
            b.call(m, json!({}));
        }
        b.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        b
    }

    fn send(&mut self, method: &str, params: Value, session: bool) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if session {
            msg["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .rx
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("chromium: no answer to {method}: {e}"));
            if v["id"].as_u64() == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("chromium: {method} failed: {e}");
                }
                return v["result"].clone();
            }
            self.event(&v);
        }
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, false)
    }

    /// A command on the page's session.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, true)
    }

    fn event(&mut self, v: &Value) {
        match v["method"].as_str() {
            Some("Runtime.consoleAPICalled") if v["params"]["type"] == "error" => {
                self.errors
                    .push(format!("console.error: {}", v["params"]["args"]));
            }
            Some("Runtime.exceptionThrown") => {
                self.errors
                    .push(format!("exception: {}", v["params"]["exceptionDetails"]));
            }
            Some("Log.entryAdded") if v["params"]["entry"]["level"] == "error" => {
                self.errors
                    .push(format!("log: {}", v["params"]["entry"]["text"]));
            }
            _ => {}
        }
    }

    /// Wait for an event, handling the others.
    fn wait_event(&mut self, method: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .rx
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("chromium: no {method}: {e}"));
            self.event(&v);
            if v["method"].as_str() == Some(method) {
                return;
            }
        }
    }

    /// Open a file and wait for its load event.
    pub fn open(&mut self, file: &Path) {
        let url = format!("file://{}", file.display());
        let r = self.call("Page.navigate", json!({ "url": url }));
        assert!(
            r.get("errorText").is_none(),
            "navigating to {url}: {}",
            r["errorText"]
        );
        self.wait_event("Page.loadEventFired");
    }

    /// Evaluate `expr` in the page and return its value (JSON-serialisable).
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("evaluating {expr}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Move the mouse to a point of the viewport.
    pub fn hover(&mut self, x: f64, y: f64) {
        self.call(
            "Input.dispatchMouseEvent",
            json!({"type": "mouseMoved", "x": x, "y": y}),
        );
    }

    /// Click at a point of the viewport.
    pub fn click(&mut self, x: f64, y: f64) {
        for t in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": t, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// A PNG of the page; `full`: the whole document, not only the viewport.
    pub fn screenshot(&mut self, full: bool) -> Vec<u8> {
        let mut p = json!({"format": "png", "captureBeyondViewport": full});
        if full {
            let s = self.eval("(() => { const e = document.documentElement; const r = e.getBoundingClientRect(); return e.namespaceURI === 'http://www.w3.org/2000/svg' ? [Math.ceil(r.width), Math.ceil(r.height)] : [Math.ceil(Math.max(r.width, e.scrollWidth)), Math.ceil(Math.max(r.height, e.scrollHeight))]; })()");
            p["clip"] = json!({"x": 0, "y": 0, "width": s[0], "height": s[1], "scale": 1});
        }
        let r = self.call("Page.captureScreenshot", p);
        base64_decode(r["data"].as_str().unwrap())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some((c - b'A') as u32),
            b'a'..=b'z' => Some((c - b'a' + 26) as u32),
            b'0'..=b'9' => Some((c - b'0' + 52) as u32),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes() {
        let Some(v) = val(c) else { continue };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

#[test]
fn base64_roundtrip() {
    assert_eq!(base64_decode("aGVsbG8="), b"hello");
    assert_eq!(base64_decode("aGk="), b"hi");
    assert_eq!(base64_decode(""), b"");
}
