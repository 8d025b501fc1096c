//! The two small HTML pages of the git front: the repository page at `/<npub>/<id>.git` and the
//! 404 page for repositories this server does not host. Pure string builders.
//!
//! They live here (not in the relay) because grasp-cgi answers every `/<npub>/...` request,
//! both under nginx + fcgiwrap and behind the relay's own listener: one implementation.

use grasp_state::identifier::percent_encode_segment;

/// Where a repository can be cloned from, as seen by the client that asked.
pub struct RepoPage<'a> {
    pub npub: &'a str,
    pub identifier: &'a str,
    /// `host[:port]` from the request.
    pub host: &'a str,
    /// `http` or `https`.
    pub scheme: &'a str,
}

impl RepoPage<'_> {
    /// `nostr://<npub>/<host>/<identifier>`, the URL git-nostr clients (ngit's
    /// `git-remote-nostr`) clone from.
    pub fn nostr_url(&self) -> String {
        format!(
            "nostr://{}/{}/{}",
            self.npub,
            self.host,
            percent_encode_segment(self.identifier)
        )
    }

    /// `<scheme>://<host>/<npub>/<identifier>.git`, plain git over smart HTTP.
    pub fn http_url(&self) -> String {
        format!(
            "{}://{}/{}/{}.git",
            self.scheme,
            self.host,
            self.npub,
            percent_encode_segment(self.identifier)
        )
    }

    pub fn html(&self) -> String {
        let title = escape(self.identifier);
        let nostr = escape(&self.nostr_url());
        let http = escape(&self.http_url());
        let npub = escape(self.npub);
        format!(
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>\n<body>\n\
             <h1>{title}</h1>\n<p>A git repository announced on Nostr by <code>{npub}</code>, served by this GRASP server.</p>\n\
             <h2>Clone with a git-nostr client</h2>\n<pre>git clone {nostr}</pre>\n\
             <p>Needs <a href=\"https://ngit.dev\">ngit</a> (<code>git-remote-nostr</code>); \
             issues, patches and pull requests live on Nostr, see <a href=\"https://gitworkshop.dev\">gitworkshop.dev</a>.</p>\n\
             <h2>Clone with plain git</h2>\n<pre>git clone {http}</pre>\n\
             <p>Pushes are accepted only when they match a repository state event signed by a maintainer.</p>\n\
             </body></html>\n"
        )
    }
}

/// The 404 page for `path` (already decoded or raw, it is escaped).
pub fn not_found_html(path: &str) -> String {
    let path = escape(path);
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Not found</title></head>\n<body>\n\
         <h1>Not found</h1>\n<p>This GRASP server hosts no repository at <code>{path}</code>.</p>\n\
         <p>Repositories live at <code>/&lt;npub&gt;/&lt;identifier&gt;.git</code> and appear once their \
         announcement (NIP-34 kind 30617) listing this server has been published to it.</p>\n\
         </body></html>\n"
    )
}

/// The plain-text 404 body for non-browser clients.
pub fn not_found_text(path: &str) -> String {
    format!(
        "Not found: this GRASP server hosts no repository at {path}. Repositories live at \
         /<npub>/<identifier>.git once an announcement listing this server was published to it.\n"
    )
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_page_urls() {
        let p = RepoPage {
            npub: "npub1abc",
            identifier: "my repo",
            host: "example.com:8080",
            scheme: "https",
        };
        assert_eq!(p.nostr_url(), "nostr://npub1abc/example.com:8080/my%20repo");
        assert_eq!(
            p.http_url(),
            "https://example.com:8080/npub1abc/my%20repo.git"
        );
        assert!(p
            .html()
            .contains("git clone nostr://npub1abc/example.com:8080/my%20repo"));
    }

    #[test]
    fn pages_escape_hostile_input() {
        let p = RepoPage {
            npub: "npub1abc",
            identifier: "<script>x</script>",
            host: "h\"><b>",
            scheme: "http",
        };
        let html = p.html();
        assert!(
            !html.contains("<script>") && !html.contains("\"><b>"),
            "{html}"
        );
        assert!(!not_found_html("/<img src=x>").contains("<img"));
    }
}
