//! GRASP-06 contributor repositories: `/prs/<npub>/<identifier>.git`, where anyone pushes the
//! commits of their own pull requests (docs/protocol.md#contributor-repositories).
//!
//! - [`names_contributor_repo`]: does a `clone` URL name this server's
//!   `/prs/<signer>/<identifier>.git` exactly? It decides the acceptance relaxation
//!   ([`relaxed_identifier`]): a pull request whose repository is not announced here is held
//!   when it names its own contributor repository here.
//! - [`contributor_targets`]: the contributor repositories a pull request binds to (its signer's,
//!   one per identifier its `a` tags name), beside the announced repositories its `a` tags name.
//! - [`mirror_targets`]: the announced repositories a released pull request is copied into.
//! - [`empty_advertisement`]: what a fetch of a contributor path with no repository on disk is
//!   answered (an empty repository), so probes create nothing.
//!
//! The push decision for these repositories is [`crate::git::push::decide_contribution_push`].

use nostr::prelude::PublicKey;

use crate::names::identifier::{RepoSpace, RepoUrlPath};
use crate::nostr::nip34::{repo_url_on_host, PullRequest};
use crate::purgatory::RepoId;

/// Most contributor repositories one pull request binds to (distinct identifiers of its first
/// `a` tags).
pub const MAX_CONTRIBUTOR_TARGETS: usize = 8;

/// Most announced repositories a pull request released from a contributor repository is copied
/// into (the first its `a` tags name): each copy costs disk, and the tags are the signer's choice.
pub const MAX_MIRRORS: usize = 8;

/// Is `url` exactly `http(s)://<public_host>/prs/<npub of signer>/<identifier>.git` (no query,
/// fragment or trailing path; the host compared as in decision 1)? Returns the identifier.
pub fn names_contributor_repo(url: &str, public_host: &str, signer: &PublicKey) -> Option<String> {
    repo_url_on_host(url, public_host)
        .filter(|p: &RepoUrlPath| p.space == RepoSpace::Prs && p.owner == *signer)
        .map(|p| p.identifier)
}

/// The identifier under which the acceptance relaxation takes `pr` (docs/protocol.md#acceptance):
/// one of its `a` tags' identifiers whose contributor repository on this server
/// (`/prs/<signer>/<identifier>.git`) one of its `clone` URLs names exactly. `None`: the
/// relaxation does not apply.
pub fn relaxed_identifier(pr: &PullRequest, public_host: &str) -> Option<String> {
    pr.clone_urls
        .iter()
        .filter_map(|url| names_contributor_repo(url, public_host, &pr.author))
        .find(|identifier| pr.repos.iter().any(|(_, d)| d == identifier))
}

/// The contributor repositories `pr` binds to: `/prs/<signer>/<d>.git` for each distinct
/// identifier `d` of its `a` tags, at most [`MAX_CONTRIBUTOR_TARGETS`], in tag order. Its commit
/// pushed to any of them (by anyone: the signed event is the gate) releases it.
pub fn contributor_targets(pr: &PullRequest) -> Vec<RepoId> {
    let mut out: Vec<RepoId> = Vec::new();
    for (_, identifier) in &pr.repos {
        if out.len() == MAX_CONTRIBUTOR_TARGETS {
            break;
        }
        if !out.iter().any(|r| &r.identifier == identifier) {
            out.push(RepoId::prs(pr.author, identifier.clone()));
        }
    }
    out
}

/// The repositories a pull request released from a contributor repository is copied into: those
/// its `a` tags name (first [`MAX_MIRRORS`]) for which `announced` holds (an announcement of that
/// owner and identifier is stored or held here). Never a contributor repository: a push to an
/// announced repository is never copied into `/prs/`.
pub fn mirror_targets(pr: &PullRequest, announced: impl Fn(&PublicKey, &str) -> bool) -> Vec<RepoId> {
    pr.repos
        .iter()
        .take(MAX_MIRRORS)
        .filter(|(owner, identifier)| announced(owner, identifier))
        .map(|(owner, identifier)| RepoId::new(*owner, identifier.clone()))
        .collect()
}

/// The git service a smart-HTTP ref advertisement is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitService {
    UploadPack,
    ReceivePack,
}

impl GitService {
    /// From the `service=` parameter of `info/refs`' query string.
    pub fn from_query(query: &str) -> Option<GitService> {
        query.split('&').find_map(|p| match p {
            "service=git-upload-pack" => Some(GitService::UploadPack),
            "service=git-receive-pack" => Some(GitService::ReceivePack),
            _ => None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            GitService::UploadPack => "git-upload-pack",
            GitService::ReceivePack => "git-receive-pack",
        }
    }

    /// What git's own backend advertises for an empty repository (no refs to negotiate).
    fn capabilities(self) -> &'static str {
        match self {
            GitService::UploadPack => {
                "multi_ack thin-pack side-band side-band-64k ofs-delta shallow deepen-since deepen-not \
                 deepen-relative no-progress include-tag multi_ack_detailed no-done object-format=sha1"
            }
            GitService::ReceivePack => {
                "report-status report-status-v2 delete-refs side-band-64k quiet atomic ofs-delta object-format=sha1"
            }
        }
    }
}

/// The answer to `GET <contributor path>/info/refs?service=<service>` when no repository exists
/// at that path: the smart-HTTP (protocol v0) ref advertisement of an empty repository, as `git
/// http-backend` gives it: `(content type, body)`. A client asking for protocol v2 reads it as a
/// server speaking v0 (git falls back by itself). A clone gets an empty repository; a push sends
/// everything it has, and its `POST` creates the repository.
pub fn empty_advertisement(service: GitService) -> (String, Vec<u8>) {
    let mut body = crate::git::pkt_line::encode(format!("# service={}\n", service.name()).as_bytes());
    body.extend_from_slice(b"0000");
    let caps = format!(
        "{} capabilities^{{}}\0{} agent=grasp-relay/{}\n",
        crate::names::refs::ZERO_OID,
        service.capabilities(),
        env!("CARGO_PKG_VERSION")
    );
    body.extend_from_slice(&crate::git::pkt_line::encode(caps.as_bytes()));
    body.extend_from_slice(b"0000");
    (format!("application/x-{}-advertisement", service.name()), body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::identifier::npub_of;
    use crate::nostr::nip34::tests::{event, tag, A};
    use nostr::prelude::Keys;

    fn pr(keys: &Keys, a: &[String], clone: &[&str]) -> PullRequest {
        let mut tags = vec![tag(&["c", A])];
        tags.extend(a.iter().map(|v| tag(&["a", v])));
        if !clone.is_empty() {
            tags.push(tag(&[&["clone"][..], clone].concat()));
        }
        PullRequest::from_event(&event(keys, crate::nostr::nip34::KIND_PR, tags)).unwrap()
    }

    #[test]
    fn the_relaxation_needs_the_signers_own_contributor_url_for_an_identifier_it_names() {
        let (signer, owner, other) = (Keys::generate(), Keys::generate(), Keys::generate());
        let a = vec![format!("30617:{}:my repo", owner.public_key().to_hex())];
        let npub = npub_of(&signer.public_key());
        let host = "git.example.com";
        let good = format!("https://git.example.com/prs/{npub}/my%20repo.git");
        assert_eq!(relaxed_identifier(&pr(&signer, &a, &[&good]), host).as_deref(), Some("my repo"));
        assert_eq!(relaxed_identifier(&pr(&signer, &a, &["https://x.org/r.git", &good]), host).as_deref(), Some("my repo"));
        let other_npub = npub_of(&other.public_key());
        for bad in [
            format!("https://other.example.com/prs/{npub}/my%20repo.git"),
            format!("https://git.example.com.evil/prs/{npub}/my%20repo.git"),
            format!("https://git.example.com/prs/{other_npub}/my%20repo.git"),
            format!("https://git.example.com/prs/{npub}/other.git"),
            format!("https://git.example.com/prs/{npub}/my%20repo.git/"),
            format!("https://git.example.com/prs/{npub}/my%20repo.git?x=1"),
            format!("https://git.example.com/{npub}/my%20repo.git"),
            format!("ftp://git.example.com/prs/{npub}/my%20repo.git"),
        ] {
            assert_eq!(relaxed_identifier(&pr(&signer, &a, &[&bad]), host), None, "{bad}");
        }
        assert_eq!(relaxed_identifier(&pr(&signer, &[], &[&good]), host), None, "no `a` tag names the identifier");
        assert_eq!(names_contributor_repo(&good, "https://git.example.com/", &signer.public_key()).as_deref(), Some("my repo"));
    }

    #[test]
    fn targets_are_the_signers_repositories_per_identifier_and_mirrors_only_announced_ones() {
        let (signer, o1, o2) = (Keys::generate(), Keys::generate(), Keys::generate());
        let a: Vec<String> = [(&o1, "x"), (&o2, "x"), (&o2, "y")].iter().map(|(k, d)| format!("30617:{}:{d}", k.public_key().to_hex())).collect();
        let p = pr(&signer, &a, &[]);
        assert_eq!(contributor_targets(&p), vec![RepoId::prs(signer.public_key(), "x"), RepoId::prs(signer.public_key(), "y")]);
        let mirrors = mirror_targets(&p, |owner, d| *owner == o2.public_key() && d == "y");
        assert_eq!(mirrors, vec![RepoId::new(o2.public_key(), "y")]);
        let many: Vec<String> = (0..20).map(|i| format!("30617:{}:r{i}", o1.public_key().to_hex())).collect();
        let p = pr(&signer, &many, &[]);
        assert_eq!(contributor_targets(&p).len(), MAX_CONTRIBUTOR_TARGETS);
        assert_eq!(mirror_targets(&p, |_, _| true).len(), MAX_MIRRORS);
    }

    #[test]
    fn an_empty_advertisement_is_what_git_sends_for_an_empty_repository() {
        let (ct, body) = empty_advertisement(GitService::UploadPack);
        assert_eq!(ct, "application/x-git-upload-pack-advertisement");
        let text = String::from_utf8(body.clone()).unwrap();
        assert!(text.starts_with("001e# service=git-upload-pack\n0000"), "{text:?}");
        assert!(text.ends_with("\n0000"), "{text:?}");
        let line = &text["001e# service=git-upload-pack\n0000".len()..text.len() - 4];
        assert_eq!(usize::from_str_radix(&line[..4], 16).unwrap(), line.len());
        assert!(line[4..].starts_with(&format!("{} capabilities^{{}}\0", crate::names::refs::ZERO_OID)));
        let (ct, body) = empty_advertisement(GitService::ReceivePack);
        assert_eq!(ct, "application/x-git-receive-pack-advertisement");
        assert!(String::from_utf8(body).unwrap().contains("report-status"));
        assert_eq!(GitService::from_query("service=git-receive-pack"), Some(GitService::ReceivePack));
        assert_eq!(GitService::from_query("x=1&service=git-upload-pack"), Some(GitService::UploadPack));
        assert_eq!(GitService::from_query("service=git-other"), None);
    }
}
