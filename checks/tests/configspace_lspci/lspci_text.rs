//! lspci's `-vvv -nn` text, read for the comparison: devices, their capability sections, and
//! the flags, numbers and ids in them.

#[derive(Debug, Default)]
pub(crate) struct LCap {
    pub(crate) offset: u16,
    pub(crate) version: Option<u8>,
    pub(crate) title: String,
    /// (label, text): a `\t\tLabel:` line plus its `\t\t\t` continuations.
    pub(crate) sections: Vec<(String, String)>,
}

impl LCap {
    pub(crate) fn section(&self, label: &str) -> Option<&str> {
        self.sections
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, t)| t.as_str())
    }
}

#[derive(Debug, Default)]
pub(crate) struct LDev {
    pub(crate) header: String,
    pub(crate) subsystem: Option<String>,
    pub(crate) regions: Vec<(u8, String)>,
    pub(crate) caps: Vec<LCap>,
    pub(crate) access_denied: bool,
    pub(crate) looped: Vec<u16>,
    pub(crate) broken: Vec<u16>,
}

pub(crate) fn is_hex_dump_line(line: &str) -> bool {
    match line.split_once(':') {
        Some((off, rest)) => {
            !off.is_empty()
                && off.len() <= 8
                && off.bytes().all(|b| b.is_ascii_hexdigit())
                && rest.starts_with(' ')
        }
        None => false,
    }
}

pub(crate) fn parse_lspci(text: &str) -> Vec<LDev> {
    let mut devs: Vec<LDev> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            if !is_hex_dump_line(line) {
                devs.push(LDev {
                    header: line.to_string(),
                    ..Default::default()
                });
            }
            continue;
        }
        let Some(dev) = devs.last_mut() else { continue };
        if let Some(rest) = line.strip_prefix("\tCapabilities: ") {
            if rest.starts_with("<access denied>") {
                dev.access_denied = true;
                continue;
            }
            let close = rest.find(']').expect("capability line has ]");
            let inside = &rest[1..close];
            let title = rest[close + 1..].trim().to_string();
            let mut it = inside.split_whitespace();
            let offset = u16::from_str_radix(it.next().unwrap(), 16).unwrap();
            let version = it
                .next()
                .map(|v| v.trim_start_matches('v').parse::<u8>().unwrap());
            if title.starts_with("<chain looped>") {
                dev.looped.push(offset);
            } else if title.starts_with("<chain broken>") {
                dev.broken.push(offset);
            } else {
                dev.caps.push(LCap {
                    offset,
                    version,
                    title,
                    sections: Vec::new(),
                });
            }
        } else if let Some(rest) = line.strip_prefix("\tRegion ") {
            let (n, desc) = rest.split_once(':').unwrap();
            dev.regions
                .push((n.trim().parse().unwrap(), desc.trim().to_string()));
        } else if let Some(rest) = line.strip_prefix("\tSubsystem: ") {
            dev.subsystem = Some(rest.to_string());
        } else if line.starts_with("\t\t\t") {
            if let Some(sec) = dev.caps.last_mut().and_then(|c| c.sections.last_mut()) {
                sec.1.push(' ');
                sec.1.push_str(line.trim());
            }
        } else if let Some(rest) = line.strip_prefix("\t\t") {
            if let Some(cap) = dev.caps.last_mut() {
                let (label, body) = rest.split_once(':').unwrap_or((rest, ""));
                cap.sections
                    .push((label.trim().to_string(), body.trim().to_string()));
            }
        }
    }
    devs
}

/// `Name+` / `Name-` token in `text`.
pub(crate) fn flag(text: &str, name: &str) -> Option<bool> {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == ';')
        .find_map(|t| match t.strip_prefix(name) {
            Some("+") => Some(true),
            Some("-") => Some(false),
            _ => None,
        })
}

/// Leading decimal number right after `key` in `text`.
pub(crate) fn num_after(text: &str, key: &str) -> Option<u64> {
    let i = text.find(key)? + key.len();
    let digits: String = text[i..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Leading hex number right after `key` in `text`.
pub(crate) fn hex_after(text: &str, key: &str) -> Option<u64> {
    let i = text.find(key)? + key.len();
    let digits: String = text[i..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect();
    u64::from_str_radix(&digits, 16).ok()
}

/// `Speed 8GT/s` -> Some(8.0); `Speed unknown` -> None.
pub(crate) fn speed(text: &str) -> Option<f64> {
    let i = text.find("Speed ")? + "Speed ".len();
    let rest = &text[i..];
    let end = rest.find("GT/s")?;
    rest[..end].parse().ok()
}

/// The last `[vvvv:dddd]` in an `lspci -nn` line.
pub(crate) fn bracket_ids(line: &str) -> Option<(u16, u16)> {
    line.rsplit('[').find_map(|part| {
        let inner = part.split(']').next()?;
        let (v, d) = inner.split_once(':')?;
        if v.len() != 4 || d.len() != 4 {
            return None;
        }
        Some((
            u16::from_str_radix(v, 16).ok()?,
            u16::from_str_radix(d, 16).ok()?,
        ))
    })
}

pub(crate) fn bdf_of(header: &str) -> String {
    header.split_whitespace().next().unwrap_or("").to_string()
}
