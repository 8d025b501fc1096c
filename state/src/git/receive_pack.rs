//! A push the relay's own listener supervises from end to end (docs/architecture.md, "Git over
//! HTTP", "A push under the relay's listener"): what it reads of the push's request, which of its
//! updates git applied, and how the release's lines join git's answer. Pure: bytes in, bytes
//! or verdicts out.
//!
//! Under the relay's listener a push runs `git http-backend` with the `pre-receive` hook alone;
//! the relay does what `post-receive` would (the release) itself once git's answer has been
//! read, and adds its lines to the answer's side band (band 2, which git shows as `remote:`
//! lines) just before the answer's final flush. For that it needs, from the head of the request
//! body, the push's commands (which refs it updates, from what to what) and whether the client
//! reads a side band ([`read_commands`]); a request it cannot read that way (no side band, a
//! signed push, a shallow push, anything unusual) runs both hooks as before.

use crate::git::pkt_line::{self, is_cut_short, next_packet, Packet, MAX_PKT_LEN};
use crate::names::refs::{is_valid_oid, is_valid_ref_name, is_zero_oid, RefMap, RefUpdate};

/// Most bytes of a request's head read for its commands; a push of more commands runs both
/// hooks (git reads it as usual).
pub const MAX_COMMANDS_BYTES: usize = 64 * 1024;

/// The side band a client asked for: packets of at most 1000 bytes (`side-band`) or 65520
/// (`side-band-64k`), headers included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideBand {
    Small,
    Large,
}

impl SideBand {
    fn max_packet(self) -> usize {
        match self {
            SideBand::Small => 1000,
            SideBand::Large => MAX_PKT_LEN,
        }
    }
}

/// What the head of a push's request says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandsRead {
    /// The whole command list, read: the updates in the client's order and its side band.
    Complete { updates: Vec<RefUpdate>, side_band: SideBand },
    /// The commands go on beyond what was read: read more (up to [`MAX_COMMANDS_BYTES`]).
    NeedMore,
    /// Not a request the relay follows (see the module doc): git and both hooks take it as is.
    Unusual,
}

/// Reads the command list at the head of a `POST git-receive-pack` body (protocol v0/v1, as
/// `git send-pack` writes it: `<old> <new> <ref>\0<capabilities>`, then one `<old> <new> <ref>`
/// per further update, then a flush).
pub fn read_commands(head: &[u8]) -> CommandsRead {
    let mut rest = head;
    let mut updates = Vec::new();
    let mut side_band = None;
    loop {
        let Some((packet, after)) = next_packet(rest) else {
            return if is_cut_short(rest) && head.len() < MAX_COMMANDS_BYTES { CommandsRead::NeedMore } else { CommandsRead::Unusual };
        };
        if head.len() - after.len() > MAX_COMMANDS_BYTES {
            return CommandsRead::Unusual;
        }
        rest = after;
        let line = match packet {
            Packet::Flush => break,
            Packet::Data(line) => line,
            Packet::Delim | Packet::ResponseEnd => return CommandsRead::Unusual,
        };
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let command = if updates.is_empty() {
            let Some(nul) = line.iter().position(|&b| b == 0) else { return CommandsRead::Unusual };
            let Ok(capabilities) = std::str::from_utf8(&line[nul + 1..]) else { return CommandsRead::Unusual };
            let asked = |name: &str| capabilities.split(' ').any(|c| c == name);
            side_band = if asked("side-band-64k") {
                Some(SideBand::Large)
            } else if asked("side-band") {
                Some(SideBand::Small)
            } else {
                None
            };
            &line[..nul]
        } else {
            line
        };
        let Some(update) = std::str::from_utf8(command).ok().and_then(parse_command) else { return CommandsRead::Unusual };
        updates.push(update);
    }
    match side_band {
        Some(side_band) if !updates.is_empty() => CommandsRead::Complete { updates, side_band },
        _ => CommandsRead::Unusual,
    }
}

/// `<old> <new> <ref>` with valid oids of one length and a valid ref name.
fn parse_command(line: &str) -> Option<RefUpdate> {
    let mut parts = line.split(' ');
    let (old, new, name) = (parts.next()?, parts.next()?, parts.next()?);
    let valid = parts.next().is_none()
        && is_valid_oid(old)
        && is_valid_oid(new)
        && old.len() == new.len()
        && old != new
        && is_valid_ref_name(name)
        && name.starts_with("refs/");
    valid.then(|| RefUpdate::new(old, new, name))
}

/// The updates of `updates` that git applied, judged from the refs after the push (`refs_now`,
/// read under the push's lock): a ref that now points where the update said, or a deleted ref
/// that is gone. What `post-receive` would have been given.
pub fn applied(updates: &[RefUpdate], refs_now: &RefMap) -> Vec<RefUpdate> {
    updates
        .iter()
        .filter(|u| match refs_now.get(&u.name) {
            Some(now) => *now == u.new,
            None => is_zero_oid(&u.new),
        })
        .cloned()
        .collect()
}

/// `lines` as side-band progress packets (band 2), each line ending with a newline, split to
/// the band's packet size.
pub fn side_band_lines(lines: &[String], band: SideBand) -> Vec<u8> {
    let mut out = Vec::new();
    let room = band.max_packet() - 5;
    for line in lines {
        let mut text = line.clone().into_bytes();
        text.push(b'\n');
        for chunk in text.chunks(room) {
            let mut payload = Vec::with_capacity(chunk.len() + 1);
            payload.push(2);
            payload.extend_from_slice(chunk);
            out.extend_from_slice(&pkt_line::encode(&payload));
        }
    }
    out
}

/// The last bytes of an answer held back while it streams, so that lines can still be put
/// before its final flush once it has ended: everything but the last four bytes goes out as
/// it comes.
#[derive(Debug, Default)]
pub struct HeldTail {
    held: Vec<u8>,
}

/// The flush that ends a side-band answer.
const FLUSH: &[u8] = b"0000";

impl HeldTail {
    /// Takes `data` in; returns what may go out now.
    pub fn pass(&mut self, data: &[u8]) -> Vec<u8> {
        self.held.extend_from_slice(data);
        let keep = self.held.len().min(FLUSH.len());
        let out_len = self.held.len() - keep;
        let out = self.held[..out_len].to_vec();
        self.held.drain(..out_len);
        out
    }

    /// The answer ended: what is still held, with `lines` put before its final flush when it
    /// ends with one (else they are dropped, and `false` says so).
    pub fn finish(self, lines: &[u8]) -> (Vec<u8>, bool) {
        if self.held == FLUSH {
            let mut out = lines.to_vec();
            out.extend_from_slice(FLUSH);
            (out, true)
        } else {
            (self.held, lines.is_empty())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::refs::ZERO_OID;
    use proptest::prelude::*;

    const A: &str = "1111111111111111111111111111111111111111";
    const B: &str = "2222222222222222222222222222222222222222";

    fn pkt(line: &[u8]) -> Vec<u8> {
        pkt_line::encode(line)
    }

    fn request(commands: &[(&str, &str, &str)], caps: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, (old, new, name)) in commands.iter().enumerate() {
            let mut line = format!("{old} {new} {name}").into_bytes();
            if i == 0 {
                line.push(0);
                line.extend_from_slice(caps.as_bytes());
            }
            out.extend_from_slice(&pkt(&line));
        }
        out.extend_from_slice(b"0000PACK...");
        out
    }

    #[test]
    fn a_push_from_git_is_read_with_its_side_band() {
        let body = request(&[(ZERO_OID, A, "refs/heads/main"), (A, B, "refs/tags/v1")], "report-status side-band-64k quiet object-format=sha1 agent=git/2.47.3");
        assert_eq!(
            read_commands(&body),
            CommandsRead::Complete {
                updates: vec![RefUpdate::new(ZERO_OID, A, "refs/heads/main"), RefUpdate::new(A, B, "refs/tags/v1")],
                side_band: SideBand::Large
            }
        );
        let small = request(&[(A, ZERO_OID, "refs/heads/old")], "report-status side-band");
        assert!(matches!(read_commands(&small), CommandsRead::Complete { side_band: SideBand::Small, .. }));
    }

    #[test]
    fn a_cut_request_asks_for_more_and_anything_odd_is_left_to_git() {
        let body = request(&[(ZERO_OID, A, "refs/heads/main")], "side-band-64k");
        for cut in [0, 2, 4, 10, body.len() - 12] {
            assert_eq!(read_commands(&body[..cut]), CommandsRead::NeedMore, "cut at {cut}");
        }
        let odd = [
            request(&[(ZERO_OID, A, "refs/heads/main")], "report-status"),
            request(&[(A, A, "refs/heads/main")], "side-band-64k"),
            request(&[(ZERO_OID, A, "HEAD")], "side-band-64k"),
            request(&[(ZERO_OID, "xyz", "refs/heads/main")], "side-band-64k"),
            [pkt(b"shallow 1111111111111111111111111111111111111111"), request(&[(ZERO_OID, A, "refs/heads/main")], "side-band-64k")].concat(),
            [pkt(b"push-cert\0side-band-64k"), b"0000".to_vec()].concat(),
            b"0000".to_vec(),
            b"zzzz".to_vec(),
        ];
        for body in odd {
            assert_eq!(read_commands(&body), CommandsRead::Unusual, "{:?}", String::from_utf8_lossy(&body));
        }
    }

    #[test]
    fn applied_updates_are_those_the_refs_show() {
        let updates = vec![RefUpdate::new(ZERO_OID, A, "refs/heads/a"), RefUpdate::new(A, B, "refs/heads/b"), RefUpdate::new(A, ZERO_OID, "refs/heads/c")];
        let now: RefMap = [("refs/heads/a".to_string(), A.to_string()), ("refs/heads/b".to_string(), A.to_string())].into();
        assert_eq!(applied(&updates, &now), vec![updates[0].clone(), updates[2].clone()]);
    }

    #[test]
    fn lines_go_before_the_final_flush() {
        let lines = side_band_lines(&["grasp: released x".to_string()], SideBand::Large);
        assert_eq!(lines, b"0017\x02grasp: released x\n");
        let mut tail = HeldTail::default();
        let mut out = tail.pass(b"000eunpack ok\n00");
        out.extend(tail.pass(b"00"));
        assert_eq!(out, b"000eunpack ok\n");
        let (end, shown) = tail.finish(&lines);
        assert!(shown);
        assert_eq!(end, [&lines[..], b"0000"].concat());
        let mut cut = HeldTail::default();
        cut.pass(b"0008abcd");
        assert_eq!(cut.finish(&lines), (b"abcd".to_vec(), false));
    }

    proptest! {
        #[test]
        fn reading_any_bytes_never_panics_and_unusual_never_grants(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let CommandsRead::Complete { updates, .. } = read_commands(&buf) {
                prop_assert!(!updates.is_empty());
                for u in updates {
                    prop_assert!(is_valid_oid(&u.old) && is_valid_oid(&u.new) && is_valid_ref_name(&u.name));
                }
            }
        }

        #[test]
        fn a_request_cut_anywhere_asks_for_more(cut in 0usize..120) {
            let body = request(&[(ZERO_OID, A, "refs/heads/main"), (A, B, "refs/heads/two")], "report-status side-band-64k agent=git/2.47.3");
            let end = body.len() - "PACK...".len();
            let cut = cut.min(end - 1);
            prop_assert_eq!(read_commands(&body[..cut]), CommandsRead::NeedMore);
            let complete = matches!(read_commands(&body[..end]), CommandsRead::Complete { .. });
            prop_assert!(complete);
        }

        #[test]
        fn the_held_tail_passes_every_byte_in_order(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..10), 0..10)) {
            let mut tail = HeldTail::default();
            let mut out = Vec::new();
            for c in &chunks { out.extend(tail.pass(c)); }
            let (end, _) = tail.finish(b"");
            out.extend(end);
            prop_assert_eq!(out, chunks.concat());
        }

        #[test]
        fn side_band_lines_are_whole_packets_of_band_two(lines in proptest::collection::vec("[ -~]{0,2500}", 0..4)) {
            let out = side_band_lines(&lines, SideBand::Small);
            let mut rest = &out[..];
            let mut text = Vec::new();
            while !rest.is_empty() {
                let (packet, after) = next_packet(rest).expect("whole packets");
                prop_assert!(rest.len() - after.len() <= 1000);
                let Packet::Data(d) = packet else { panic!("data only") };
                prop_assert_eq!(d[0], 2);
                text.extend_from_slice(&d[1..]);
                rest = after;
            }
            let expected: String = lines.iter().map(|l| format!("{l}\n")).collect();
            prop_assert_eq!(text, expected.into_bytes());
        }
    }
}
