//! The header block of a CGI/1.1 response (RFC 3875 section 6): `Name: value` lines up to an
//! empty line, `Status: 200 OK` among them. One parser (on `httparse`) for both readers of such
//! blocks: the relay reading `grasp-cgi`'s output and `grasp-cgi` reading
//! `git http-backend`'s. Lines may end in CRLF or LF.

/// Largest CGI header block accepted from a child process.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header lines accepted in one block.
pub const MAX_HEADERS: usize = 64;

/// A parsed header block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgiHead {
    /// Every header line in order, `Status` included, values without surrounding blanks.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Bytes of the input the block took, its ending empty line included.
    pub len: usize,
}

/// Why a header block is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgiHeadError {
    #[error("CGI header block is larger than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("malformed CGI header block: {0}")]
    Malformed(String),
    #[error("bad CGI Status {0:?}: expected a three-digit code such as `Status: 200 OK`")]
    BadStatus(String),
}

/// Parses the header block at the start of `buf`. `Ok(None)`: the block is not complete yet
/// (read more, unless the input ended).
pub fn parse_head(buf: &[u8]) -> Result<Option<CgiHead>, CgiHeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match httparse::parse_headers(buf, &mut headers) {
        Ok(httparse::Status::Complete((len, parsed))) => {
            if len > MAX_HEAD_BYTES {
                return Err(CgiHeadError::TooLarge);
            }
            let headers = parsed
                .iter()
                .map(|h| (h.name.to_string(), h.value.trim_ascii().to_vec()))
                .collect();
            Ok(Some(CgiHead { headers, len }))
        }
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => Err(CgiHeadError::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(CgiHeadError::Malformed(e.to_string())),
    }
}

impl CgiHead {
    /// The status code of the `Status` header; 200 without one.
    pub fn status(&self) -> Result<u16, CgiHeadError> {
        let Some((_, value)) = self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("status")) else {
            return Ok(200);
        };
        value
            .get(..3)
            .filter(|c| c.iter().all(u8::is_ascii_digit))
            .and_then(|c| std::str::from_utf8(c).ok())
            .and_then(|c| c.parse::<u16>().ok())
            .filter(|c| (100..=999).contains(c))
            .filter(|_| value.get(3).is_none_or(|b| *b == b' '))
            .ok_or_else(|| CgiHeadError::BadStatus(String::from_utf8_lossy(value).into_owned()))
    }

    /// The headers other than `Status`.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.headers
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case("status"))
            .map(|(n, v)| (n.as_str(), v.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_blocks_with_crlf_or_lf() {
        let input = b"Status: 404 Not Found\r\nContent-Type:  text/plain \nX: a\r\n\r\nbody";
        let head = parse_head(input).unwrap().unwrap();
        assert_eq!(head.len, input.len() - 4);
        assert_eq!(head.status().unwrap(), 404);
        assert_eq!(
            head.headers,
            vec![
                ("Status".to_string(), b"404 Not Found".to_vec()),
                ("Content-Type".to_string(), b"text/plain".to_vec()),
                ("X".to_string(), b"a".to_vec()),
            ]
        );
        assert_eq!(head.fields().map(|(n, _)| n).collect::<Vec<_>>(), ["Content-Type", "X"]);
        let bare = parse_head(b"\n").unwrap().unwrap();
        assert_eq!((bare.len, bare.status().unwrap()), (1, 200));
    }

    #[test]
    fn incomplete_malformed_and_oversized_blocks() {
        assert_eq!(parse_head(b"Content-Type: text/plain\n"), Ok(None));
        assert_eq!(parse_head(b""), Ok(None));
        assert!(matches!(parse_head(b"no colon here\n\n"), Err(CgiHeadError::Malformed(_))));
        assert!(matches!(parse_head(b"Bad Name: x\n\n"), Err(CgiHeadError::Malformed(_))));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X{i}: y\n")).collect::<String>() + "\n";
        assert!(matches!(parse_head(many.as_bytes()), Err(CgiHeadError::Malformed(_))));
        let long = format!("X: {}\n", "y".repeat(MAX_HEAD_BYTES));
        assert_eq!(parse_head(long.as_bytes()), Err(CgiHeadError::TooLarge));
        assert_eq!(parse_head(format!("{long}\n").as_bytes()), Err(CgiHeadError::TooLarge));
        for bad in ["Status: abc", "Status: 20", "Status: 2000 x", "Status: 099 x", "Status:"] {
            let head = parse_head(format!("{bad}\n\n").as_bytes()).unwrap().unwrap();
            assert!(matches!(head.status(), Err(CgiHeadError::BadStatus(_))), "{bad}");
        }
        assert_eq!(parse_head(b"status: 204\n\n").unwrap().unwrap().status(), Ok(204));
    }

    proptest! {
        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(Some(head)) = parse_head(&input) {
                prop_assert!(head.len <= input.len());
                let _ = head.status();
            }
        }

        #[test]
        fn well_formed_blocks_round_trip(
            fields in proptest::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,15}", "[!-~]([ !-~]{0,30}[!-~])?"), 0..10),
            status in 100u16..1000,
            crlf: bool,
        ) {
            let eol = if crlf { "\r\n" } else { "\n" };
            let mut text = format!("Status: {status} Reason{eol}");
            for (n, v) in &fields {
                text.push_str(&format!("{n}: {v}{eol}"));
            }
            text.push_str(eol);
            let len = text.len();
            text.push_str("body\r\n\r\n");
            let head = parse_head(text.as_bytes()).unwrap().unwrap();
            prop_assert_eq!(head.len, len);
            prop_assert_eq!(head.status().unwrap(), status);
            let parsed: Vec<(String, Vec<u8>)> = head.fields().map(|(n, v)| (n.to_string(), v.to_vec())).collect();
            let expected: Vec<(String, Vec<u8>)> = fields.iter().filter(|(n, _)| !n.eq_ignore_ascii_case("status")).map(|(n, v)| (n.clone(), v.as_bytes().to_vec())).collect();
            prop_assert_eq!(parsed, expected);
        }
    }
}
