//! The home page (`GET /` from a browser) and the public URLs every page shows.
//!
//! Every URL on a page (relay, clone URLs, links) is built by [`PublicUrls`] from the configured
//! public host (`--public-host`), never from the request's `Host` header: a forged header must not
//! change what a visitor copies. The repository page itself is rendered by `grasp-cgi` from the
//! data of `GET /v1/repo/...` on the hook API ([`crate::api::repos`]), built with the same
//! [`PublicUrls`]. Text goes through [`grasp_state::contract::html::escape`], always.

use grasp_state::names::host::PublicUrls;
use grasp_state::contract::html::{escape, format_utc, STYLE};
use grasp_state::names::identifier::npub_of;
use grasp_state::nostr::nip34::{first_value, Announcement, KIND_ANNOUNCEMENT};
use nostr::prelude::{Filter, Kind};

use crate::config::Config;
use crate::grasp::Grasp;

/// Repositories per page of the home page.
pub const PAGE_SIZE: usize = 20;
/// The last page the home page shows (bounds the store query of one request).
pub const MAX_PAGE: usize = 100;
/// Longest name and description shown (characters); longer ones are cut with `…`.
const MAX_NAME_CHARS: usize = 120;
const MAX_DESCRIPTION_CHARS: usize = 600;

/// `s` cut to `max` characters (with `…`), for names and descriptions from the network.
pub fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// One served repository on the home page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoCard {
    pub npub: String,
    pub identifier: String,
    pub name: Option<String>,
    pub description: Option<String>,
    pub announced_at: u64,
}

/// The 1-based page number of a `?page=N` query (1 when absent or unreadable, at most
/// [`MAX_PAGE`]).
pub fn page_of(query: Option<&str>) -> usize {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("page="))
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, MAX_PAGE)
}

/// Served repositories for `page` (newest announcement first), and whether a later page exists.
pub async fn served_repos(grasp: &Grasp, page: usize) -> (Vec<RepoCard>, bool) {
    let wanted = page * PAGE_SIZE + 1;
    let filter = Filter::new().kind(Kind::Custom(KIND_ANNOUNCEMENT)).limit(wanted);
    let events = match grasp.relay.store().query(vec![filter], wanted).await {
        Ok(events) => events,
        Err(e) => {
            tracing::error!(error = %e, "home page: event store query failed");
            Vec::new()
        }
    };
    let mut cards: Vec<RepoCard> = events
        .iter()
        .filter_map(|ev| {
            let a = Announcement::from_event(ev).ok()?;
            // Stored announcements of repositories this server does not hold are not listed.
            grasp.repo_path(&a.owner, &a.identifier).filter(|p| p.is_dir())?;
            Some(RepoCard {
                npub: npub_of(&a.owner),
                identifier: a.identifier,
                name: first_value(ev, "name").map(str::to_string).filter(|n| !n.trim().is_empty()),
                description: first_value(ev, "description").map(str::to_string).filter(|d| !d.trim().is_empty()),
                announced_at: ev.created_at.as_secs(),
            })
        })
        .skip((page - 1) * PAGE_SIZE)
        .collect();
    let more = cards.len() > PAGE_SIZE;
    cards.truncate(PAGE_SIZE);
    (cards, more)
}

/// The home page for `?page=N`.
pub async fn home(cfg: &Config, grasp: &Grasp, query: Option<&str>) -> String {
    let page = page_of(query);
    let (repos, more) = served_repos(grasp, page).await;
    render_home(cfg, grasp.trust(), &repos, page, more)
}

/// The home page's HTML (pure). Like the NIP-11 document it describes the whole relay, so it
/// takes the whole configuration.
pub fn render_home(cfg: &Config, trust: &crate::trust::Trust, repos: &[RepoCard], page: usize, more: bool) -> String {
    let urls = PublicUrls::new(&cfg.server.public_host());
    let nips: Vec<String> = crate::nostr::nip11::SUPPORTED_NIPS
        .iter()
        .map(|n| format!("<a href=\"https://github.com/nostr-protocol/nips/blob/master/{n:02}.md\">NIP-{n:02}</a>"))
        .collect();
    let grasps: Vec<String> = crate::nostr::nip11::supported_grasps(&cfg.relay_sync, &cfg.trust, &cfg.services).into_iter().map(escape).collect();
    let criteria = escape(&crate::nostr::nip11::acceptance_criteria(&cfg.server, &cfg.purgatory, &cfg.services, trust));
    let ttl = cfg.purgatory.purgatory_ttl.as_secs();
    let wait = if ttl.is_multiple_of(60) { format!("{} minutes", ttl / 60) } else { format!("{ttl} seconds") };
    let relay = escape(&urls.relay_url());
    let base = escape(&urls.http_base());
    let host = escape(urls.host());
    let hint = escape(&urls.nostr_relay_hint());
    let mut list = String::new();
    for r in repos {
        let link = escape(&urls.repo_http_url(&r.npub, &r.identifier));
        let title = escape(&shorten(r.name.as_deref().unwrap_or(&r.identifier), MAX_NAME_CHARS));
        let desc = r
            .description
            .as_deref()
            .map(|d| format!("<div>{}</div>", escape(&shorten(d, MAX_DESCRIPTION_CHARS))))
            .unwrap_or_default();
        list.push_str(&format!(
            "<div class=\"repo\"><a href=\"{link}\">{title}</a> <span class=\"muted\">{id} · {owner} · announced {when}</span>{desc}</div>\n",
            id = escape(&r.identifier),
            owner = escape(&shorten(&r.npub, 20)),
            when = format_utc(r.announced_at),
        ));
    }
    if repos.is_empty() {
        list.push_str(if page == 1 {
            "<p class=\"muted\">No repository is served yet.</p>\n"
        } else {
            "<p class=\"muted\">No repositories on this page.</p>\n"
        });
    }
    let mut nav = String::new();
    if page > 1 {
        nav.push_str(&format!("<a href=\"{base}/?page={}\">← newer</a>", page - 1));
    }
    if more {
        nav.push_str(&format!("<a href=\"{base}/?page={}\">older →</a>", page + 1));
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{name}</title><style>{STYLE}</style></head>\n<body>\n\
<h1>{name}</h1>\n<p>{desc}</p>\n\
<p>A <a href=\"https://ngit.dev/grasp/\">GRASP</a> server: a Nostr relay and git hosting on one address. \
Nobody has an account; signed Nostr events (<a href=\"https://github.com/nostr-protocol/nips/blob/master/34.md\">NIP-34</a>) decide who may push.</p>\n\
<table>\n<tr><th>Nostr relay</th><td><code>{relay}</code></td></tr>\n\
<tr><th>Git repositories</th><td><code>{base}/&lt;npub&gt;/&lt;identifier&gt;.git</code></td></tr>\n\
<tr><th>Supports</th><td>{grasps}; {nips}</td></tr>\n\
<tr><th>Version</th><td>grasp-relay {version}</td></tr>\n</table>\n\
<h2>Clone a repository</h2>\n\
<p>With a git-nostr client (<a href=\"https://ngit.dev\">ngit</a> installs <code>git-remote-nostr</code>):</p>\n\
<pre>git clone nostr://&lt;npub&gt;/{hint}/&lt;identifier&gt;</pre>\n\
<p>With plain git:</p>\n<pre>git clone {base}/&lt;npub&gt;/&lt;identifier&gt;.git</pre>\n\
<h2>Publish a repository</h2>\n<ol>\n\
<li>Announce it (kind 30617) with a <code>clone</code> URL <code>{base}/&lt;your npub&gt;/&lt;identifier&gt;.git</code> and a <code>relays</code> URL <code>{relay}</code>.</li>\n\
<li>Publish its state (kind 30618): the commit every branch and tag points at.</li>\n\
<li>Push exactly that state over git. The push is accepted only if it makes the repository match a state signed by the owner or a maintainer; then the events are served.</li>\n</ol>\n\
<p><code>ngit init --grasp-server {base}</code> does all three.</p>\n\
<h2>What this server accepts</h2>\n<ul>\n\
<li>Repositories whose announcement lists this server (<code>{host}</code>) in both a clone URL and a relay URL.</li>\n\
<li>State events from the owner and the maintainers the owner lists (and those they list).</li>\n\
<li>Pull requests, issues, patches, comments and other events about repositories served here; deletions (kind 5) and user GRASP lists (kind 10317).</li>\n\
<li>New announcements, states and pull requests wait until their git data is pushed and are dropped after {wait} otherwise.</li>\n\
<li>Everything else is refused, with a message saying why.</li>\n</ul>\n\
<details><summary>The exact rules (as in the relay's NIP-11 document)</summary><p>{criteria}</p></details>\n\
<h2>Repositories</h2>\n<p class=\"muted\">Newest first.</p>\n{list}<nav>{nav}</nav>\n\
</body></html>\n",
        name = escape(&cfg.pages.name),
        desc = escape(&cfg.pages.description),
        grasps = grasps.join(", "),
        nips = nips.join(", "),
        version = env!("CARGO_PKG_VERSION"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_numbers_are_bounded() {
        assert_eq!(page_of(None), 1);
        assert_eq!(page_of(Some("page=3")), 3);
        assert_eq!(page_of(Some("x=1&page=2")), 2);
        assert_eq!(page_of(Some("page=0")), 1);
        assert_eq!(page_of(Some("page=-4")), 1);
        assert_eq!(page_of(Some("page=99999999999999999999999")), 1);
        assert_eq!(page_of(Some("page=5000")), MAX_PAGE);
    }

    #[test]
    fn home_page_escapes_and_links() {
        let mut cfg = Config::defaults();
        cfg.server.public_host = Some("git.example.com".into());
        cfg.pages.name = "<b>relay</b>".into();
        let repos = vec![RepoCard {
            npub: "npub1abc".into(),
            identifier: "r&d".into(),
            name: Some("<script>alert(1)</script>".into()),
            description: Some("\"quoted\" & 'single'".into()),
            announced_at: 0,
        }];
        let html = render_home(&cfg, &crate::trust::Trust::default(), &repos, 2, true);
        assert!(!html.contains("<script>") && !html.contains("<b>relay"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("&quot;quoted&quot; &amp; &#39;single&#39;"));
        assert!(html.contains("href=\"https://git.example.com/npub1abc/r%26d.git\""), "{html}");
        assert!(html.contains("<code>wss://git.example.com</code>"));
        assert!(html.contains("href=\"https://git.example.com/?page=1\"") && html.contains("?page=3"));
        assert!(!html.contains("<script"), "no JavaScript on the page");
    }

    #[test]
    fn long_text_is_shortened() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcd", 3), "abc…");
    }
}
