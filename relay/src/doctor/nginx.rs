//! The doctor's look at an nginx site configuration (docs/nginx/grasp.conf is the example): is
//! git routed to grasp-cgi through FastCGI with request buffering off, and do the values passed
//! to grasp-cgi match the relay's configuration. Pure: the text and the relay's settings in,
//! findings out.
//!
//! The configuration is read as nginx reads it (directives ending in `;`, blocks in `{}`,
//! quoted strings, `#` comments); `include`d files are not followed: give the doctor the output
//! of `nginx -T` to check the whole configuration as nginx loaded it.

use std::path::{Path, PathBuf};

use grasp_state::contract::env_names;

use super::Finding;

/// One directive: its name, arguments, line and block (if it has one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    pub name: String,
    pub args: Vec<String>,
    pub line: usize,
    pub block: Option<Vec<Directive>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Semicolon,
    Open,
    Close,
}

fn tokens(text: &str) -> Result<Vec<(Token, usize)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            ';' => out.push((Token::Semicolon, line)),
            '{' => out.push((Token::Open, line)),
            '}' => out.push((Token::Close, line)),
            '"' | '\'' => {
                let start = line;
                let mut word = String::new();
                loop {
                    match chars.next() {
                        None => return Err(format!("line {start}: a quoted string never ends")),
                        Some(q) if q == c => break,
                        Some('\\') => {
                            if let Some(next) = chars.next() {
                                line += usize::from(next == '\n');
                                word.push(next);
                            }
                        }
                        Some(other) => {
                            line += usize::from(other == '\n');
                            word.push(other);
                        }
                    }
                }
                out.push((Token::Word(word), start));
            }
            c => {
                let mut word = String::from(c);
                while let Some(&next) = chars.peek() {
                    if next.is_whitespace() || matches!(next, ';' | '{' | '}') {
                        break;
                    }
                    word.push(next);
                    chars.next();
                }
                out.push((Token::Word(word), line));
            }
        }
    }
    Ok(out)
}

/// Parses an nginx configuration into its directives.
pub fn parse(text: &str) -> Result<Vec<Directive>, String> {
    let tokens = tokens(text)?;
    let mut at = 0;
    let directives = block(&tokens, &mut at, 0)?;
    if at < tokens.len() {
        return Err(format!("line {}: unexpected `}}`", tokens[at].1));
    }
    Ok(directives)
}

fn block(tokens: &[(Token, usize)], at: &mut usize, depth: usize) -> Result<Vec<Directive>, String> {
    if depth > 64 {
        return Err("blocks nested too deep".into());
    }
    let mut out = Vec::new();
    while let Some((token, line)) = tokens.get(*at) {
        let Token::Word(name) = token else {
            if *token == Token::Close && depth > 0 {
                return Ok(out);
            }
            return Err(format!("line {line}: unexpected `{}`", if *token == Token::Close { "}" } else { ";" }));
        };
        *at += 1;
        let mut args = Vec::new();
        loop {
            match tokens.get(*at) {
                Some((Token::Word(w), _)) => {
                    args.push(w.clone());
                    *at += 1;
                }
                Some((Token::Semicolon, _)) => {
                    *at += 1;
                    out.push(Directive { name: name.clone(), args, line: *line, block: None });
                    break;
                }
                Some((Token::Open, _)) => {
                    *at += 1;
                    let inner = block(tokens, at, depth + 1)?;
                    match tokens.get(*at) {
                        Some((Token::Close, _)) => *at += 1,
                        _ => return Err(format!("line {line}: the block of `{name}` never ends")),
                    }
                    out.push(Directive { name: name.clone(), args, line: *line, block: Some(inner) });
                    break;
                }
                Some((Token::Close, l)) => return Err(format!("line {l}: `{name}` needs a `;` before `}}`")),
                None => return Err(format!("line {line}: `{name}` needs a `;`")),
            }
        }
    }
    if depth > 0 {
        return Err("a block never ends (missing `}`)".into());
    }
    Ok(out)
}

/// What grasp-cgi must be given for this relay.
#[derive(Debug, Clone)]
pub struct Expected {
    pub cgi_path: PathBuf,
    pub data_dir: PathBuf,
    pub max_push_bytes: u64,
    pub git_idle_timeout_secs: u64,
    pub push_lock_wait_secs: u64,
    pub git_min_rate: u64,
}

/// A location block with the blocks around it (outermost first).
struct Located<'a> {
    location: &'a Directive,
    outer: Vec<&'a Directive>,
}

fn locations<'a>(directives: &'a [Directive], outer: &mut Vec<&'a Directive>, found: &mut Vec<Located<'a>>) {
    for d in directives {
        if let Some(inner) = &d.block {
            if d.name == "location" {
                found.push(Located { location: d, outer: outer.clone() });
            }
            outer.push(d);
            locations(inner, outer, found);
            outer.pop();
        }
    }
}

/// The value of the simple directive `name` in force in `located` (the innermost block that
/// sets it, as nginx inherits it), with the top level (`http` as included) last.
fn in_force<'a>(top: &'a [Directive], located: &'a Located<'a>, name: &str) -> Option<&'a Directive> {
    let own = located.location.block.as_deref().unwrap_or_default();
    let mut scopes: Vec<&[Directive]> = vec![own];
    scopes.extend(located.outer.iter().rev().map(|d| d.block.as_deref().unwrap_or_default()));
    scopes.push(top);
    scopes.into_iter().find_map(|scope| scope.iter().rev().find(|d| d.name == name && d.block.is_none()))
}

/// The `fastcgi_param NAME value` of the location itself (params are not merged with outer
/// ones once a location has any).
fn fastcgi_param<'a>(located: &'a Located<'a>, name: &str) -> Option<&'a str> {
    located
        .location
        .block
        .as_deref()
        .unwrap_or_default()
        .iter()
        .rev()
        .find(|d| d.name == "fastcgi_param" && d.args.first().map(String::as_str) == Some(name))
        .and_then(|d| d.args.get(1))
        .map(String::as_str)
}

/// Is there a `name` directive anywhere?
fn has_directive(directives: &[Directive], name: &str) -> bool {
    directives.iter().any(|d| d.name == name || d.block.as_deref().is_some_and(|b| has_directive(b, name)))
}

/// `2g`, `1m`, `512k`, `1024` in bytes, as nginx reads sizes.
fn nginx_size(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let (digits, shift) = match lower.chars().last()? {
        'k' => (&lower[..lower.len() - 1], 10),
        'm' => (&lower[..lower.len() - 1], 20),
        'g' => (&lower[..lower.len() - 1], 30),
        _ => (&lower[..], 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// The findings about the nginx configuration `text` (from the file `path`).
pub fn check(path: &Path, text: &str, expected: &Expected) -> Vec<Finding> {
    let check = "nginx";
    let shown = path.display();
    let top = match parse(text) {
        Ok(top) => top,
        Err(e) => return vec![Finding::fail(check, format!("{shown}: cannot read it: {e}"), "check it with `nginx -t`")],
    };
    let mut found = Vec::new();
    locations(&top, &mut Vec::new(), &mut found);
    let git: Vec<&Located<'_>> = found
        .iter()
        .filter(|l| {
            let body = l.location.block.as_deref().unwrap_or_default();
            body.iter().any(|d| d.name == "fastcgi_pass")
                && fastcgi_param(l, "SCRIPT_FILENAME").is_some_and(|s| Path::new(s).file_name().is_some_and(|f| f == "grasp-cgi"))
        })
        .collect();
    if git.is_empty() {
        let includes = has_directive(&top, "include");
        let hint = if includes { " (its `include`s are not followed: give the doctor the output of `nginx -T`)" } else { "" };
        return vec![Finding::fail(
            check,
            format!("{shown}: no location passes git requests to grasp-cgi (fastcgi_pass with `fastcgi_param SCRIPT_FILENAME .../grasp-cgi`){hint}"),
            "add the repository location of docs/nginx/grasp.conf",
        )];
    }
    let mut out = Vec::new();
    for l in git {
        let at = format!("{shown}:{} (location {})", l.location.line, l.location.args.join(" "));
        let mut problems = Vec::new();
        let mut fixes = Vec::new();
        let mut warnings = Vec::new();
        if !l.location.args.iter().any(|a| a.contains(".git")) {
            warnings.push("its pattern does not name `.git` paths: git URLs are /<npub>/<identifier>.git/...".to_string());
        }
        let buffering = in_force(&top, l, "fastcgi_request_buffering").and_then(|d| d.args.first()).map(String::as_str);
        if buffering != Some("off") {
            problems.push(format!("request buffering is {} (nginx spools every push to disk before grasp-cgi sees a byte, so pushes cannot stream and stalls are not detected)", buffering.unwrap_or("on (nginx's default)")));
            fixes.push("`fastcgi_request_buffering off;` in the location".to_string());
        }
        let response_buffering = in_force(&top, l, "fastcgi_buffering").and_then(|d| d.args.first()).map(String::as_str);
        if response_buffering != Some("off") {
            warnings.push("response buffering is on: git's progress does not reach the client live (`fastcgi_buffering off;`)".to_string());
        }
        let script = fastcgi_param(l, "SCRIPT_FILENAME").unwrap_or_default();
        if Path::new(script) != expected.cgi_path {
            warnings.push(format!("SCRIPT_FILENAME is {script}, the relay's grasp-cgi is {}", expected.cgi_path.display()));
        }
        let root = expected.data_dir.join(grasp_state::contract::layout::GIT_DIR);
        match fastcgi_param(l, env_names::GIT_ROOT) {
            Some(p) if Path::new(p) == root => {}
            Some(p) => {
                problems.push(format!("{git_root} is {p}, but the relay's repositories are in {}", root.display(), git_root = env_names::GIT_ROOT));
                fixes.push(format!("`fastcgi_param {git_root} <data-dir>/git;`", git_root = env_names::GIT_ROOT));
            }
            None => {
                problems.push(format!("no {}: grasp-cgi does not know where the repositories are", env_names::GIT_ROOT));
                fixes.push(format!("`fastcgi_param {git_root} <data-dir>/git;`", git_root = env_names::GIT_ROOT));
            }
        }
        let hooks = expected.data_dir.join(grasp_state::contract::layout::HOOKS_DIR);
        if let Some(p) = fastcgi_param(l, env_names::HOOKS_DIR).filter(|p| Path::new(p) != hooks) {
            problems.push(format!("{hooks_dir} is {p}, but the relay installs the hooks in {}", hooks.display(), hooks_dir = env_names::HOOKS_DIR));
            fixes.push(format!("`fastcgi_param {hooks_dir} <data-dir>/hooks;`", hooks_dir = env_names::HOOKS_DIR));
        }
        if let Some(p) = fastcgi_param(l, env_names::DATA_DIR).filter(|p| Path::new(p) != expected.data_dir) {
            problems.push(format!("{data_dir} is {p}, but the relay's data directory is {}", expected.data_dir.display(), data_dir = env_names::DATA_DIR));
            fixes.push(format!("`fastcgi_param {data_dir} <data-dir>;`", data_dir = env_names::DATA_DIR));
        }
        for (param, relay, flag) in [
            (env_names::GIT_IDLE_TIMEOUT, expected.git_idle_timeout_secs, "git-idle-timeout (seconds)"),
            (env_names::PUSH_LOCK_WAIT, expected.push_lock_wait_secs, "push-lock-wait (seconds)"),
            (env_names::GIT_MIN_RATE, expected.git_min_rate, "git-min-rate"),
            (env_names::MAX_PUSH_BYTES, expected.max_push_bytes, "max-push-bytes"),
        ] {
            if let Some(value) = fastcgi_param(l, param).filter(|v| v.parse::<u64>().ok() != Some(relay)) {
                warnings.push(format!("{param} is {value}, the relay's {flag} is {relay}: keep them equal"));
            }
        }
        let body = in_force(&top, l, "client_max_body_size").and_then(|d| d.args.first()).cloned().unwrap_or_else(|| "1m".into());
        match nginx_size(&body) {
            Some(0) => {}
            Some(size) if size < expected.max_push_bytes => warnings.push(format!(
                "client_max_body_size {body} is below the relay's max-push-bytes ({}): larger pushes get nginx's 413",
                super::checks::human(expected.max_push_bytes)
            )),
            _ => {}
        }
        if !problems.is_empty() {
            let mut what = format!("{at}: {}", problems.join("; "));
            if !warnings.is_empty() {
                what.push_str(&format!("; also: {}", warnings.join("; ")));
            }
            out.push(Finding::fail(check, what, format!("{} (docs/nginx/grasp.conf)", fixes.join(", "))));
        } else if !warnings.is_empty() {
            out.push(Finding::warn(check, format!("{at}: {}", warnings.join("; ")), "see docs/nginx/grasp.conf"));
        } else {
            out.push(Finding::ok(check, format!("{at}: git goes to grasp-cgi, request buffering off")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Level;

    const EXAMPLE: &str = include_str!("../../../docs/nginx/grasp.conf");

    fn expected() -> Expected {
        Expected {
            cgi_path: "/usr/bin/grasp-cgi".into(),
            data_dir: "/var/lib/grasp-relay".into(),
            max_push_bytes: 1 << 30,
            git_idle_timeout_secs: 60,
            push_lock_wait_secs: 10,
            git_min_rate: 1024,
        }
    }

    fn verdict(text: &str) -> Vec<Finding> {
        check(Path::new("/etc/nginx/sites-enabled/grasp"), text, &expected())
    }

    #[test]
    fn the_example_site_passes() {
        let found = verdict(EXAMPLE);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].level, Level::Ok, "{found:#?}");
        // The repositories and the GRASP-06 contributor repositories under /prs/.
        assert!(found[0].what.contains("location ~ ^(/prs)?/npub1[^/]+/[^/]+\\.git(/.*)?$"), "{found:#?}");
    }

    #[test]
    fn request_buffering_must_be_off_where_git_runs() {
        let on = EXAMPLE.replace("fastcgi_request_buffering off;", "fastcgi_request_buffering on;");
        let found = verdict(&on);
        assert_eq!(found[0].level, Level::Fail, "{found:#?}");
        assert!(found[0].what.contains("request buffering is on"), "{found:#?}");
        // Not set anywhere: nginx's default is on.
        let unset = EXAMPLE.replace("fastcgi_request_buffering off;", "");
        assert!(verdict(&unset)[0].what.contains("on (nginx's default)"));
        // Set at the server level, it is inherited.
        let outer = unset.replace("    client_max_body_size 1m;", "    client_max_body_size 1m;\n    fastcgi_request_buffering off;");
        assert_eq!(verdict(&outer)[0].level, Level::Ok, "{:#?}", verdict(&outer));
        // ... unless the location turns it back on.
        let back = outer.replace("fastcgi_buffering off;", "fastcgi_buffering off; fastcgi_request_buffering on;");
        assert_eq!(verdict(&back)[0].level, Level::Fail);
    }

    #[test]
    fn git_must_reach_grasp_cgi_in_the_relays_data_directory() {
        let elsewhere = EXAMPLE.replace("SCRIPT_FILENAME   /usr/bin/grasp-cgi", "SCRIPT_FILENAME   /usr/lib/git-core/git-http-backend");
        let found = verdict(&elsewhere);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].level, Level::Fail);
        assert!(found[0].what.contains("no location passes git requests to grasp-cgi"), "{found:#?}");
        let other_root = EXAMPLE.replace("GRASP_GIT_ROOT    /var/lib/grasp-relay/git", "GRASP_GIT_ROOT    /srv/git");
        let found = verdict(&other_root);
        assert_eq!(found[0].level, Level::Fail);
        assert!(found[0].what.contains("GRASP_GIT_ROOT is /srv/git, but the relay's repositories are in /var/lib/grasp-relay/git"), "{found:#?}");
        let mismatch = EXAMPLE.replace("GRASP_GIT_IDLE_TIMEOUT 60", "GRASP_GIT_IDLE_TIMEOUT 30").replace("client_max_body_size 2g", "client_max_body_size 10m");
        let found = verdict(&mismatch);
        assert_eq!(found[0].level, Level::Warn, "{found:#?}");
        assert!(found[0].what.contains("GRASP_GIT_IDLE_TIMEOUT is 30, the relay's git-idle-timeout (seconds) is 60"), "{found:#?}");
        assert!(found[0].what.contains("client_max_body_size 10m is below the relay's max-push-bytes (1 GiB)"), "{found:#?}");
        let includes = "http {\n  include /etc/nginx/sites-enabled/*;\n}\n";
        assert!(verdict(includes)[0].what.contains("nginx -T"));
    }

    #[test]
    fn the_reader_follows_nginx_syntax() {
        let parsed = parse("a 1 '2 3'; # comment ; {\nb \"x\\\"y\" {\n  c;\n}\n").unwrap();
        assert_eq!(parsed[0], Directive { name: "a".into(), args: vec!["1".into(), "2 3".into()], line: 1, block: None });
        assert_eq!(parsed[1].args, ["x\"y"]);
        assert_eq!(parsed[1].line, 2);
        assert_eq!(parsed[1].block.as_ref().unwrap()[0].line, 3);
        for broken in ["a {", "a", "}", "a { b }", "\"open"] {
            assert!(parse(broken).is_err(), "{broken}");
        }
        assert_eq!(nginx_size("2g"), Some(2 << 30));
        assert_eq!(nginx_size("512K"), Some(512 << 10));
        assert_eq!(nginx_size("0"), Some(0));
        assert_eq!(nginx_size("x"), None);
    }
}
