//! git's pkt-line framing, read and written: the one place the relay and grasp-cgi spell it.
//!
//! A pkt-line is four lower-case hex digits giving its length (the four included), then its
//! payload; `0000` is a flush, `0001` a delimiter and `0002` a response end (protocol v2).
//! Lengths 3 and 4 are never valid, and nothing here reads beyond the buffer it is given.

/// Longest pkt-line git writes or reads (header included).
pub const MAX_PKT_LEN: usize = 65520;

/// One pkt-line as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet<'a> {
    Flush,
    Delim,
    ResponseEnd,
    Data(&'a [u8]),
}

/// The length a pkt-line's four-byte header gives (itself included); `None` when `header` is
/// not four lower-case hex digits.
fn header_len(header: &[u8]) -> Option<usize> {
    if header.len() != 4 || !header.iter().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) {
        return None;
    }
    usize::from_str_radix(std::str::from_utf8(header).ok()?, 16).ok()
}

/// The first pkt-line of `buf` and what follows it; `None` when `buf` does not start with a
/// whole, well-formed one (too short, a bad header, a length of 3 or 4).
pub fn next_packet(buf: &[u8]) -> Option<(Packet<'_>, &[u8])> {
    let len = header_len(buf.get(..4)?)?;
    match len {
        0 => Some((Packet::Flush, &buf[4..])),
        1 => Some((Packet::Delim, &buf[4..])),
        2 => Some((Packet::ResponseEnd, &buf[4..])),
        3 | 4 => None,
        n => Some((Packet::Data(buf.get(4..n)?), &buf[n..])),
    }
}

/// Whether `buf` is the start of a well-formed pkt-line that more bytes would complete (where
/// [`next_packet`] says `None` only for want of bytes).
pub fn is_cut_short(buf: &[u8]) -> bool {
    let hex = |b: &u8| b.is_ascii_hexdigit() && !b.is_ascii_uppercase();
    match buf.get(..4) {
        None => buf.iter().all(hex),
        Some(header) => header_len(header).is_some_and(|n| n > 4 && n > buf.len()),
    }
}

/// `payload` as one pkt-line. The caller keeps it within [`MAX_PKT_LEN`] - 4 bytes.
pub fn encode(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{:04x}", payload.len() + 4).into_bytes();
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn special_packets_and_data() {
        assert_eq!(next_packet(b"0000rest"), Some((Packet::Flush, &b"rest"[..])));
        assert_eq!(next_packet(b"0001"), Some((Packet::Delim, &b""[..])));
        assert_eq!(next_packet(b"0002"), Some((Packet::ResponseEnd, &b""[..])));
        assert_eq!(next_packet(b"0009hello0000"), Some((Packet::Data(b"hello"), &b"0000"[..])));
        for bad in [&b"000"[..], b"0003", b"0004", b"00A9hello", b"0009hell", b"zzzz"] {
            assert_eq!(next_packet(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        for (buf, short) in [(&b""[..], true), (b"00", true), (b"0009hell", true), (b"0009hello", false), (b"0004", false), (b"00A9h", false), (b"zz", false)] {
            assert_eq!(is_cut_short(buf), short, "{:?}", String::from_utf8_lossy(buf));
        }
    }

    proptest! {
        #[test]
        fn encode_then_read_gives_the_payload_back(payload in proptest::collection::vec(any::<u8>(), 1..300), rest in proptest::collection::vec(any::<u8>(), 0..20)) {
            let mut buf = encode(&payload);
            buf.extend_from_slice(&rest);
            prop_assert_eq!(next_packet(&buf), Some((Packet::Data(&payload), &rest[..])));
        }

        #[test]
        fn any_bytes_read_without_panic(buf in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Some((packet, rest)) = next_packet(&buf) {
                prop_assert!(rest.len() <= buf.len().saturating_sub(4));
                if let Packet::Data(d) = packet { prop_assert!(!d.is_empty()); }
            }
        }
    }
}
