//! What one repository announcement (kind 30617) says about maintainership: NIP-34 role tags,
//! or the `maintainers` list of older clients (docs/protocol.md#maintainer-authority).
//!
//! A role tag is `["M" | "m" | "o", <pubkey>, <boundary>...]`: lead maintainer, co-maintainer,
//! moderator. Boundaries are unix timestamps alternating start, end, start, end...: an entry with
//! none, or with an odd number (the last one a start), is active; an even number means the role
//! ended. `defer` is allowed only as the last value in an end position. Any other value, or a
//! subject that is not a public key, makes the entry malformed, and a malformed entry grants
//! nothing. The rules are ngit 3's (the client every GRASP user has), so this server and the
//! client agree on who may move a branch.
//!
//! - When an announcement has any role tag, the role tags decide and `maintainers` is ignored.
//!   Its author with no role entry of their own is implicitly a maintainer; an author who has
//!   entries but no active `M`/`m` one (left, or moderates only), or whose last self-entry ends in
//!   `defer` with no later active self-entry, has *declined*: their own record wins over anyone
//!   listing them.
//! - Without role tags, `maintainers` lists the maintainers; a value that is not a public key
//!   makes the whole list grant nothing (ngit refuses such an announcement).
//!
//! [`Claims`] is the result: whom the announcement lists as active maintainers (the edges of
//! the maintainer graph), the lead it names, whether its author declined. Who is *confirmed* is
//! decided over all announcements of an identifier by the maintainer set (`MaintainerSet`, in the
//! `authority` room, which builds on this one).

use nostr::prelude::PublicKey;

/// The role letter of a role tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// `M`: lead maintainer.
    Lead,
    /// `m`: co-maintainer.
    Maintainer,
    /// `o`: moderator (never publishes authoritative state).
    Moderator,
}

impl Role {
    /// The role of a tag name, if it is a role tag.
    pub fn from_tag(name: &str) -> Option<Role> {
        match name {
            "M" => Some(Role::Lead),
            "m" => Some(Role::Maintainer),
            "o" => Some(Role::Moderator),
            _ => None,
        }
    }

    /// Lead or co-maintainer.
    pub fn maintains(self) -> bool {
        self != Role::Moderator
    }
}

/// One history boundary of a role entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// A unix timestamp (a start at even positions, an end at odd ones).
    At(u64),
    /// `defer`: a history copy's open end, valid only as the last end value.
    Defer,
}

/// The boundaries after the subject, or `None` when one is malformed (not a decimal timestamp,
/// or `defer` anywhere but the last end position).
pub fn boundaries(values: &[String]) -> Option<Vec<Boundary>> {
    let mut out = Vec::with_capacity(values.len());
    for (index, value) in values.iter().enumerate() {
        if value == "defer" {
            let last_end = index % 2 == 1 && index + 1 == values.len();
            if !last_end {
                return None;
            }
            out.push(Boundary::Defer);
        } else {
            out.push(Boundary::At(value.parse().ok()?));
        }
    }
    Some(out)
}

/// Active: no boundaries, or an odd number of them (the last one a start).
pub fn is_active(boundaries: &[Boundary]) -> bool {
    boundaries.len() % 2 == 1 || boundaries.is_empty()
}

/// The lead an announcement names with its active `M` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lead {
    /// No active `M` entry.
    #[default]
    None,
    /// Exactly one key is named by active `M` entries.
    Named(PublicKey),
    /// Active `M` entries name several keys: the path seeds nobody.
    Conflict,
}

/// What one announcement says about maintainership.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Claims {
    /// The keys it lists as active maintainers (`M`/`m`, or `maintainers` without role tags),
    /// author excluded, in tag order, no duplicates.
    pub maintainers: Vec<PublicKey>,
    /// Active moderators (`o`), author included when they moderate, in tag order, no duplicates.
    pub moderators: Vec<PublicKey>,
    /// The lead its active `M` entries name.
    pub lead: Lead,
    /// Its author declined maintainership by their own record (see the module docs).
    pub declines: bool,
    /// It carries role tags (which then decide, `maintainers` ignored).
    pub role_tags: bool,
    /// Role entries (or, without role tags, `maintainers` values) that are malformed.
    pub malformed: usize,
}

/// A borrowed view of [`Claims`]: what the maintainer-set computation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimsRef<'a> {
    pub maintainers: &'a [PublicKey],
    pub lead: Lead,
    pub declines: bool,
}

impl Claims {
    /// The view the maintainer-set computation reads.
    pub fn as_ref(&self) -> ClaimsRef<'_> {
        ClaimsRef { maintainers: &self.maintainers, lead: self.lead, declines: self.declines }
    }

    /// Read the claims of an announcement by `author` from its tags (each a slice of strings,
    /// name first). Never panics; a malformed entry grants nothing.
    pub fn read<'a>(author: &PublicKey, tags: impl IntoIterator<Item = &'a [String]>) -> Claims {
        let author_hex = author.to_hex();
        let tags: Vec<&[String]> = tags.into_iter().collect();
        let mut claims = Claims::default();
        let mut leads: Vec<PublicKey> = Vec::new();
        // The author's own parseable entries: (role, boundaries).
        let mut own: Vec<(Role, Vec<Boundary>)> = Vec::new();
        let mut author_has_entry = false;
        for tag in &tags {
            let Some(role) = tag.first().and_then(|name| Role::from_tag(name)) else { continue };
            claims.role_tags = true;
            let subject = tag.get(1);
            // ngit compares the subject's text with the author's hex for self-records.
            if subject == Some(&author_hex) {
                author_has_entry = true;
            }
            let parsed = subject.filter(|s| !s.is_empty()).and_then(|s| PublicKey::parse(s).ok());
            let bounds = boundaries(tag.get(2..).unwrap_or(&[]));
            let (Some(pk), Some(bounds)) = (parsed, bounds) else {
                claims.malformed += 1;
                continue;
            };
            if subject == Some(&author_hex) {
                own.push((role, bounds.clone()));
            }
            if !is_active(&bounds) {
                continue;
            }
            match role {
                Role::Moderator => push_unique(&mut claims.moderators, pk),
                Role::Lead | Role::Maintainer => {
                    if role == Role::Lead {
                        push_unique(&mut leads, pk);
                    }
                    if pk != *author {
                        push_unique(&mut claims.maintainers, pk);
                    }
                }
            }
        }
        if claims.role_tags {
            let active_maintainer = own.iter().any(|(role, b)| role.maintains() && is_active(b));
            claims.declines = author_has_entry && (!active_maintainer || unresolved_self_defer(&own));
            claims.lead = match leads.as_slice() {
                [] => Lead::None,
                [one] => Lead::Named(*one),
                _ => Lead::Conflict,
            };
        } else {
            for tag in tags.iter().filter(|t| t.first().map(String::as_str) == Some("maintainers")) {
                for value in &tag[1..] {
                    match PublicKey::parse(value) {
                        Ok(pk) if pk != *author => push_unique(&mut claims.maintainers, pk),
                        Ok(_) => {}
                        Err(_) => claims.malformed += 1,
                    }
                }
            }
            if claims.malformed > 0 {
                claims.maintainers.clear();
            }
        }
        claims
    }
}

/// An own entry ending `<start>, defer` with no later active own entry (any role) starting
/// after it: the author's apparent role is unusable until they repair it.
fn unresolved_self_defer(own: &[(Role, Vec<Boundary>)]) -> bool {
    let later_active_start = |after: u64| {
        own.iter().any(|(_, b)| b.len() % 2 == 1 && matches!(b.last(), Some(Boundary::At(start)) if *start > after))
    };
    own.iter().any(|(_, b)| match b.as_slice() {
        [.., Boundary::At(start), Boundary::Defer] => !later_active_start(*start),
        _ => false,
    })
}

fn push_unique(list: &mut Vec<PublicKey>, pk: PublicKey) {
    if !list.contains(&pk) {
        list.push(pk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nostr::prelude::Keys;

    fn tag(values: &[&str]) -> Vec<String> {
        values.iter().map(|s| s.to_string()).collect()
    }

    fn read(author: &PublicKey, tags: &[Vec<String>]) -> Claims {
        Claims::read(author, tags.iter().map(Vec::as_slice))
    }

    fn key() -> PublicKey {
        Keys::generate().public_key()
    }

    #[test]
    fn boundaries_alternate_and_defer_only_last_end() {
        let s = |v: &[&str]| tag(v);
        assert_eq!(boundaries(&s(&[])), Some(vec![]));
        assert_eq!(boundaries(&s(&["5"])), Some(vec![Boundary::At(5)]));
        assert_eq!(boundaries(&s(&["5", "defer"])), Some(vec![Boundary::At(5), Boundary::Defer]));
        assert_eq!(boundaries(&s(&["defer"])), None, "defer in a start position");
        assert_eq!(boundaries(&s(&["1", "defer", "3"])), None, "defer not last");
        assert_eq!(boundaries(&s(&["1", "2", "3", "defer"])).map(|b| b.len()), Some(4));
        assert_eq!(boundaries(&s(&["soon"])), None);
        assert_eq!(boundaries(&s(&["-1"])), None);
        assert!(is_active(&[]) && is_active(&[Boundary::At(1)]) && !is_active(&[Boundary::At(1), Boundary::At(2)]));
        assert!(!is_active(&[Boundary::At(1), Boundary::Defer]));
    }

    #[test]
    fn role_tags_decide_and_maintainers_is_ignored_with_them() {
        let (a, b, c, d) = (key(), key(), key(), key());
        let claims = read(
            &a,
            &[
                tag(&["M", &a.to_hex()]),
                tag(&["m", &b.to_hex(), "10"]),
                tag(&["m", &c.to_hex(), "10", "20"]),
                tag(&["o", &d.to_hex()]),
                tag(&["maintainers", &c.to_hex(), &d.to_hex()]),
            ],
        );
        assert!(claims.role_tags && !claims.declines);
        assert_eq!(claims.maintainers, vec![b], "ended entries and `maintainers` grant nothing");
        assert_eq!(claims.moderators, vec![d]);
        assert_eq!(claims.lead, Lead::Named(a));
    }

    #[test]
    fn older_announcements_list_in_maintainers() {
        let (a, b, c) = (key(), key(), key());
        let claims = read(&a, &[tag(&["maintainers", &b.to_hex(), &a.to_hex()]), tag(&["maintainers", &c.to_hex(), &b.to_hex()])]);
        assert!(!claims.role_tags && !claims.declines);
        assert_eq!(claims.maintainers, vec![b, c]);
        assert_eq!(claims.lead, Lead::None);
        // One bad value and the list grants nothing.
        let claims = read(&a, &[tag(&["maintainers", &b.to_hex(), "nonsense"])]);
        assert!(claims.maintainers.is_empty() && claims.malformed == 1);
    }

    #[test]
    fn the_authors_own_record_decides_whether_they_declined() {
        let (a, b) = (key(), key());
        // Implicit: no own entry.
        assert!(!read(&a, &[tag(&["m", &b.to_hex()])]).declines);
        // Left: own entry ended.
        assert!(read(&a, &[tag(&["m", &a.to_hex(), "1", "2"]), tag(&["M", &b.to_hex()])]).declines);
        // Moderator only.
        assert!(read(&a, &[tag(&["o", &a.to_hex()]), tag(&["M", &b.to_hex()])]).declines);
        // Own entry malformed only: declines (its garbage grants nothing).
        assert!(read(&a, &[tag(&["m", &a.to_hex(), "x"])]).declines);
        // Self-defer without a later active own entry blocks; with one, it does not.
        assert!(read(&a, &[tag(&["m", &a.to_hex(), "5", "defer"]), tag(&["M", &a.to_hex()])]).declines);
        assert!(!read(&a, &[tag(&["m", &a.to_hex(), "5", "defer"]), tag(&["M", &a.to_hex(), "6"])]).declines);
        assert!(read(&a, &[tag(&["m", &a.to_hex(), "5", "defer"]), tag(&["M", &a.to_hex(), "4"])]).declines);
        // Active own `m`.
        assert!(!read(&a, &[tag(&["m", &a.to_hex(), "3"])]).declines);
    }

    #[test]
    fn leads_conflict_and_malformed_entries_count() {
        let (a, b, c) = (key(), key(), key());
        let claims = read(&a, &[tag(&["M", &b.to_hex()]), tag(&["M", &c.to_hex()]), tag(&["M", &b.to_hex(), "1", "2"])]);
        assert_eq!(claims.lead, Lead::Conflict);
        assert_eq!(claims.maintainers, vec![b, c]);
        let claims = read(&a, &[tag(&["M"]), tag(&["m", ""]), tag(&["m", "zz"]), tag(&["M", &b.to_hex(), "defer"])]);
        assert_eq!(claims.malformed, 4);
        assert!(claims.maintainers.is_empty() && claims.lead == Lead::None && claims.role_tags);
        // npub subjects are read as ngit reads them.
        use nostr::prelude::ToBech32;
        let claims = read(&a, &[tag(&["m", &b.to_bech32().unwrap()])]);
        assert_eq!(claims.maintainers, vec![b]);
    }
}
