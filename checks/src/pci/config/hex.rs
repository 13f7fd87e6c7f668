//! `lspci -x`/`-xxx`/`-xxxx` hex dumps into config space bytes.

use super::regs::EXT_END;

/// Split `lspci -x`/`-xxx`/`-xxxx` output into devices.
///
/// Returns one `(header line, bytes)` pair per device. A device starts at a
/// line beginning with a bus address (`00:02.0 PCI bridge: ...`, optionally
/// with a domain, `0000:00:02.0 ...`); hex lines (`00: 86 80 04 2f ...`,
/// offsets up to `ff0:`) fill its bytes. Other lines (e.g. `lspci -vvv`
/// text interleaved with the hex) are ignored, as lspci's own `-F` reader
/// does. More lenient than lspci: leading whitespace and CRLF are accepted,
/// and hex lines without a preceding header form devices named `""` (a new
/// one at every `00:` line). Gaps are filled with 0xff; bytes at offsets of
/// 4096 and above are dropped. Never panics.
pub fn parse_hex_dump(text: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut current: Option<usize> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if is_bdf_header(line) {
            out.push((line.to_string(), Vec::new()));
            current = Some(out.len() - 1);
            continue;
        }
        let Some((offset, bytes)) = parse_hex_line(line) else {
            continue;
        };
        let start_unnamed = match current.and_then(|i| out.get(i)) {
            None => true,
            Some((name, data)) => name.is_empty() && offset == 0 && !data.is_empty(),
        };
        if start_unnamed {
            out.push((String::new(), Vec::new()));
            current = Some(out.len() - 1);
        }
        let Some((_, data)) = current.and_then(|i| out.get_mut(i)) else {
            continue;
        };
        for (k, b) in bytes.into_iter().enumerate() {
            let pos = offset.saturating_add(k);
            if pos >= EXT_END {
                break;
            }
            if data.len() <= pos {
                data.resize(pos + 1, 0xff);
            }
            if let Some(slot) = data.get_mut(pos) {
                *slot = b;
            }
        }
    }
    out
}

/// The bus address at the start of a [`parse_hex_dump`] header line.
pub fn dump_bdf(header: &str) -> &str {
    header.split_whitespace().next().unwrap_or("")
}

fn is_hex_run(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `[dddd:]bb:dd.f` followed by whitespace or the end of the line.
fn is_bdf_header(line: &str) -> bool {
    // The first whitespace-separated token; what follows is the description.
    let first = line.split_whitespace().next().unwrap_or("");
    let parts: Vec<&str> = first.split(':').collect();
    let (bus, devfn) = match parts.as_slice() {
        [bus, devfn] => (*bus, *devfn),
        [dom, bus, devfn] if is_hex_run(dom, 4, 6) => (*bus, *devfn),
        _ => return false,
    };
    let Some((dev, func)) = devfn.split_once('.') else {
        return false;
    };
    is_hex_run(bus, 2, 2)
        && is_hex_run(dev, 2, 2)
        && func.len() == 1
        && func.bytes().all(|b| (b'0'..=b'7').contains(&b))
}

/// `off: hh hh ...` -> (offset, bytes). Stops at the first non-byte token
/// (tolerates trailing ASCII columns); None if the line is not a hex line.
fn parse_hex_line(line: &str) -> Option<(usize, Vec<u8>)> {
    let (off, rest) = line.split_once(':')?;
    if !is_hex_run(off, 2, 8) {
        return None;
    }
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let offset = usize::from_str_radix(off, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for tok in rest.split_whitespace() {
        if !is_hex_run(tok, 2, 2) {
            break;
        }
        bytes.push(u8::from_str_radix(tok, 16).ok()?);
    }
    if bytes.is_empty() {
        return None;
    }
    Some((offset, bytes))
}
