//! The HTML pages of the git front: the repository page at `/<npub>/<id>.git` and the 404 page
//! for repositories this server does not host.
//!
//! They live here (not in the relay) because grasp-cgi answers every `/<npub>/...` request,
//! both under nginx + fcgiwrap and behind the relay's own listener: one implementation. The
//! repository page's data comes from the relay's hook API ([`crate::relay_api`]): name,
//! description, maintainers, the latest state, and every URL, built by the relay from its
//! configured public host (never from this request's `Host` header). All text goes through
//! [`grasp_state::contract::html::escape`]; no JavaScript.

use std::path::Path;

use grasp_state::contract::hook_api::{RepoInfo, RepoStatus};
use grasp_state::contract::html::{escape, format_utc, STYLE};
use grasp_state::names::identifier::RepoUrlPath;

/// Longest name and description shown (characters); longer ones are cut with `…`.
const MAX_NAME_CHARS: usize = 200;
const MAX_DESCRIPTION_CHARS: usize = 4000;
/// Most refs listed on the page.
const MAX_REFS_SHOWN: usize = 200;

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        s.chars().take(max).chain(std::iter::once('…')).collect()
    }
}

/// A link when `url` is http(s), plain text otherwise (no `javascript:` or other schemes).
fn link(url: &str, text: &str) -> String {
    let lower = url.trim_start().to_ascii_lowercase();
    if lower.starts_with("https://") || lower.starts_with("http://") {
        format!("<a href=\"{}\" rel=\"nofollow noopener\">{}</a>", escape(url), escape(text))
    } else {
        escape(text)
    }
}

fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head>\n<body>\n",
        escape(title)
    )
}

/// The repository page (status line, HTML) for `repo`, with the data the relay on `data_dir`
/// gives. Without an answer from the relay, a page saying so (status 503); when the relay does not
/// serve or hold the repository, the 404 page.
pub fn repo_page(data_dir: Option<&Path>, repo: &RepoUrlPath) -> (&'static str, String) {
    let Some(data_dir) = data_dir else {
        return ("503 Service Unavailable", unavailable_html(repo, &format!("grasp-cgi runs without {}", grasp_state::contract::env_names::DATA_DIR)));
    };
    match crate::relay_api::repo_info(data_dir, &repo.npub, &repo.identifier) {
        Ok(Some(info)) => ("200 OK", repo_html(&info)),
        Ok(None) => ("404 Not Found", not_found_html(&format!("/{}/{}.git", repo.npub, repo.identifier))),
        Err(e) => {
            eprintln!("grasp-cgi: repository page of {}/{}: {e:#}", repo.npub, repo.identifier);
            ("503 Service Unavailable", unavailable_html(repo, "the relay did not answer"))
        }
    }
}

fn unavailable_html(repo: &RepoUrlPath, why: &str) -> String {
    format!(
        "{}<h1>{}</h1>\n<p>A git repository of <code>{}</code>. Its details are unavailable right now ({}); \
         try again in a moment.</p>\n</body></html>\n",
        head(&repo.identifier),
        escape(&repo.identifier),
        escape(&repo.npub),
        escape(why)
    )
}

/// The repository page for `info` (pure).
pub fn repo_html(info: &RepoInfo) -> String {
    let title = info.name.as_deref().filter(|n| !n.trim().is_empty()).unwrap_or(&info.identifier);
    let title = shorten(title, MAX_NAME_CHARS);
    let mut page = head(&title);
    page.push_str(&format!("<h1>{}</h1>\n<p class=\"muted\">{} · a git repository announced on Nostr</p>\n", escape(&title), escape(&info.identifier)));
    if let Some(d) = info.description.as_deref().filter(|d| !d.trim().is_empty()) {
        page.push_str(&format!("<p>{}</p>\n", escape(&shorten(d, MAX_DESCRIPTION_CHARS))));
    }
    if info.status == RepoStatus::Held {
        page.push_str(
            "<p><strong>Not served yet:</strong> its announcement waits for the repository's git data. \
             It is served once a maintainer pushes a state they signed.</p>\n",
        );
    }
    page.push_str("<h2>Clone</h2>\n<p>With a git-nostr client (<a href=\"https://ngit.dev\">ngit</a>):</p>\n");
    page.push_str(&format!("<pre>git clone {}</pre>\n<p>With plain git:</p>\n<pre>git clone {}</pre>\n", escape(&info.nostr_clone_url), escape(&info.http_clone_url)));
    page.push_str(&format!(
        "<p>Issues, patches and pull requests: {}.</p>\n",
        link(&info.web_client_url, "open in gitworkshop.dev")
    ));
    page.push_str("<h2>About</h2>\n<table>\n");
    page.push_str(&format!("<tr><th>Owner</th><td><code>{}</code></td></tr>\n", escape(&info.npub)));
    let others: Vec<String> = info.maintainers.iter().filter(|m| **m != info.npub).map(|m| format!("<code>{}</code>", escape(m))).collect();
    let owner_only = if info.maintainers.contains(&info.npub) { "the owner only" } else { "none confirmed" };
    page.push_str(&format!(
        "<tr><th>Maintainers</th><td>{}</td></tr>\n",
        if others.is_empty() { owner_only.to_string() } else { others.join("<br>") }
    ));
    let invited: Vec<String> = info.invited.iter().take(20).map(|m| format!("<code>{}</code>", escape(m))).collect();
    if !invited.is_empty() {
        page.push_str(&format!(
            "<tr><th>Invited</th><td>{}<br><span class=\"muted\">not maintainers until they run <code>ngit repo accept</code></span></td></tr>\n",
            invited.join("<br>")
        ));
    }
    let branch = info.default_branch.as_deref().map(|b| b.strip_prefix("refs/heads/").unwrap_or(b));
    page.push_str(&format!(
        "<tr><th>Default branch</th><td>{}</td></tr>\n",
        branch.map_or_else(|| "<span class=\"muted\">none declared</span>".to_string(), |b| format!("<code>{}</code>", escape(b)))
    ));
    let web: Vec<String> = info.web.iter().take(10).map(|w| link(w, w)).collect();
    if !web.is_empty() {
        page.push_str(&format!("<tr><th>Web</th><td>{}</td></tr>\n", web.join("<br>")));
    }
    page.push_str(&format!("<tr><th>Address</th><td><code>{}</code></td></tr>\n</table>\n", escape(&info.naddr)));
    page.push_str("<h2>Latest state</h2>\n");
    match info.state_created_at {
        None => page.push_str("<p class=\"muted\">No state published by the maintainers is stored yet.</p>\n"),
        Some(at) => {
            page.push_str(&format!("<p class=\"muted\">Signed by a maintainer, published {}.</p>\n<table>\n", format_utc(at)));
            for r in info.refs.iter().take(MAX_REFS_SHOWN) {
                page.push_str(&format!("<tr><td><code>{}</code></td><td><code>{}</code></td></tr>\n", escape(&r.name), escape(&r.oid)));
            }
            page.push_str("</table>\n");
            if info.refs.len() > MAX_REFS_SHOWN {
                page.push_str(&format!("<p class=\"muted\">and {} more refs.</p>\n", info.refs.len() - MAX_REFS_SHOWN));
            }
        }
    }
    page.push_str(
        "<p class=\"muted\">Pushes are accepted only when they make the repository match a state signed \
         by the owner or a maintainer.</p>\n</body></html>\n",
    );
    page
}

/// The 404 page for `path` (already decoded or raw, it is escaped).
pub fn not_found_html(path: &str) -> String {
    format!(
        "{}<h1>Not found</h1>\n<p>This GRASP server hosts no repository at <code>{}</code>.</p>\n\
         <p>Repositories live at <code>/&lt;npub&gt;/&lt;identifier&gt;.git</code> and appear once their \
         announcement (NIP-34 kind 30617) listing this server has been published to it.</p>\n\
         </body></html>\n",
        head("Not found"),
        escape(path)
    )
}

/// The plain-text 404 body for non-browser clients.
pub fn not_found_text(path: &str) -> String {
    format!(
        "Not found: this GRASP server hosts no repository at {path}. Repositories live at \
         /<npub>/<identifier>.git once an announcement listing this server was published to it.\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use grasp_state::contract::hook_api::{RefView, HOOK_API_VERSION};

    fn info() -> RepoInfo {
        RepoInfo {
            version: HOOK_API_VERSION,
            npub: "npub1abc".into(),
            identifier: "my-repo".into(),
            status: RepoStatus::Served,
            name: Some("<script>alert(1)</script>".into()),
            description: Some("\"quotes\" & <img src=x onerror=alert(1)> 'single'".into()),
            maintainers: vec!["npub1abc".into(), "npub1def".into()],
            invited: vec!["npub1<invited>".into()],
            http_clone_url: "https://git.example.com/npub1abc/my-repo.git".into(),
            nostr_clone_url: "nostr://npub1abc/git.example.com/my-repo".into(),
            naddr: "naddr1xyz".into(),
            web_client_url: "https://gitworkshop.dev/naddr1xyz".into(),
            web: vec!["javascript:alert(1)".into(), "https://example.org/\"><b>".into()],
            default_branch: Some("refs/heads/main".into()),
            refs: vec![RefView { name: "refs/heads/main".into(), oid: "a".repeat(40) }],
            state_created_at: Some(0),
        }
    }

    #[test]
    fn repo_page_shows_the_fields() {
        let html = repo_html(&info());
        for needle in [
            "git clone nostr://npub1abc/git.example.com/my-repo",
            "git clone https://git.example.com/npub1abc/my-repo.git",
            "href=\"https://gitworkshop.dev/naddr1xyz\"",
            "<code>npub1def</code>",
            "<th>Invited</th><td><code>npub1&lt;invited&gt;</code>",
            "ngit repo accept",
            "<th>Default branch</th><td><code>main</code>",
            &"a".repeat(40),
            "1970-01-01 00:00 UTC",
        ] {
            assert!(html.contains(needle), "{needle} missing in {html}");
        }
        let held = repo_html(&RepoInfo { status: RepoStatus::Held, state_created_at: None, ..info() });
        assert!(held.contains("Not served yet") && held.contains("No state"));
    }

    #[test]
    fn pages_escape_hostile_input() {
        let html = repo_html(&info());
        assert!(!html.contains("<script") && !html.contains("<img") && !html.contains("\"><b>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("&quot;quotes&quot; &amp; &lt;img"));
        assert!(!html.contains("href=\"javascript:"), "only http(s) links: {html}");
        assert!(!not_found_html("/<img src=x>").contains("<img"));
    }
}
