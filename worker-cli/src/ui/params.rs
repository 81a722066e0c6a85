//! What a request asks for: its query or form pairs, a letter filter, and an action's target.

use std::collections::{BTreeMap, BTreeSet};

use super::letters::Filter;
use super::pages::{self, FilterText};
use super::sampler;
use crate::replay::Action;

/// The most letters one selection may name.
const MAX_SELECTED: usize = 1_000;

/// The query or form pairs of a request, repeated keys kept.
#[derive(Debug, Default)]
pub(crate) struct Params(Vec<(String, String)>);

impl Params {
    pub(crate) fn parse(text: &[u8]) -> Self {
        Self(form_urlencoded::parse(text).into_owned().collect())
    }

    pub(crate) fn get(&self, key: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    }

    fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A filter from `reason`, `since`, `until`; `Err` names the field that does not parse.
pub(crate) fn filter_of(params: &Params) -> Result<(Filter, FilterText), String> {
    let text = FilterText {
        reason: params.get("reason").trim().to_owned(),
        since: params.get("since").trim().to_owned(),
        until: params.get("until").trim().to_owned(),
    };
    let now = sampler::now_ms();
    let since_ms = time_of(&text.since, now).map_err(|e| format!("since: {e}"))?;
    let until_ms = time_of(&text.until, now).map_err(|e| format!("until: {e}"))?;
    let reason = (!text.reason.is_empty()).then(|| text.reason.clone());
    if reason.as_ref().is_some_and(|r| r.len() > 1024) {
        return Err("reason: expected at most 1024 bytes".to_owned());
    }
    Ok((
        Filter {
            reason,
            since_ms,
            until_ms,
        },
        text,
    ))
}

/// A time as ms since the epoch: RFC 3339 (`2026-01-31T12:00:00Z`; without a zone, UTC; the
/// seconds may be left out) or a duration back from now (`90m`).
fn time_of(text: &str, now_ms: i64) -> Result<Option<i64>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    if let Ok(ago) = humantime::parse_duration(text) {
        let ago = i64::try_from(ago.as_millis()).unwrap_or(i64::MAX);
        return Ok(Some(now_ms.saturating_sub(ago)));
    }
    let mut stamp = text.to_owned();
    if stamp.len() == 16 {
        stamp.push_str(":00");
    }
    let at = humantime::parse_rfc3339_weak(&stamp).map_err(|_| {
        format!("expected a time like 2026-01-31T12:00:00Z or a duration like 1h, found {text:?}")
    })?;
    let ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("{text:?} is before 1970"))?
        .as_millis();
    Ok(Some(i64::try_from(ms).unwrap_or(i64::MAX)))
}

/// What an action is asked to act on.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) action: Action,
    pub(crate) letters: Option<BTreeMap<i32, BTreeSet<i64>>>,
    pub(crate) filter: Filter,
    pub(crate) what: String,
    /// The hidden fields that carry it to the action.
    pub(crate) fields: Vec<(&'static str, String)>,
}

/// Reads `do` (`replay-selected`, `skip-filter`, ...) or `action` + `scope`, the letters and
/// the filter of a confirmation or an action.
pub(crate) fn target_of(params: &Params) -> Result<Target, String> {
    let (action, scope) = match params.get("do") {
        "" => (params.get("action"), params.get("scope")),
        both => both
            .split_once('-')
            .ok_or_else(|| format!("do: unknown {both:?}"))?,
    };
    let action = match action {
        "replay" => Action::Replay,
        "skip" => Action::Skip,
        other => return Err(format!("action: expected replay or skip, found {other:?}")),
    };
    let (filter, text) = filter_of(params)?;
    let mut fields: Vec<(&'static str, String)> = vec![("scope", scope.to_owned())];
    let (letters, what) = match scope {
        "selected" => {
            let mut letters: BTreeMap<i32, BTreeSet<i64>> = BTreeMap::new();
            let mut count = 0;
            for pair in params.all("letter") {
                let (p, o) = pair
                    .split_once(':')
                    .and_then(|(p, o)| Some((p.parse::<i32>().ok()?, o.parse::<i64>().ok()?)))
                    .filter(|(_, o)| *o >= 0)
                    .ok_or_else(|| format!("letter: expected partition:offset, found {pair:?}"))?;
                if letters.entry(p).or_default().insert(o) {
                    count += 1;
                }
                fields.push(("letter", pair.to_owned()));
            }
            if count == 0 {
                return Err("no letter is selected".to_owned());
            }
            if count > MAX_SELECTED {
                return Err(format!("at most {MAX_SELECTED} letters at once"));
            }
            let what = if count == 1 {
                let (p, offsets) = letters
                    .iter()
                    .next()
                    .map_or((0, None), |(p, o)| (*p, o.first()));
                format!("the letter {p}@{}", offsets.copied().unwrap_or(0))
            } else {
                format!("{count} selected letters")
            };
            (Some(letters), what)
        }
        "filter" => {
            for (k, v) in [
                ("reason", &text.reason),
                ("since", &text.since),
                ("until", &text.until),
            ] {
                if !v.is_empty() {
                    fields.push((k, v.clone()));
                }
            }
            (None, pages::describe_filter(&filter, &text))
        }
        other => {
            return Err(format!(
                "scope: expected selected or filter, found {other:?}"
            ));
        }
    };
    Ok(Target {
        action,
        letters,
        filter,
        what,
        fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_or_durations_back_from_now() {
        let now = 1_800_000_000_000;
        assert_eq!(time_of("", now), Ok(None));
        assert_eq!(time_of("90m", now), Ok(Some(now - 90 * 60_000)));
        assert_eq!(
            time_of("2026-01-31T12:00", now),
            Ok(Some(1_769_860_800_000))
        );
        assert_eq!(
            time_of("2026-01-31T12:00:00Z", now),
            Ok(Some(1_769_860_800_000))
        );
        assert!(
            time_of("yesterday", now)
                .unwrap_err()
                .contains("expected a time")
        );
    }

    #[test]
    fn a_target_names_its_letters_or_its_filter() {
        let params = Params::parse(b"do=replay-selected&letter=0:5&letter=1:7&letter=0:5");
        let target = target_of(&params).expect("a target");
        assert_eq!(target.action, Action::Replay);
        assert_eq!(target.what, "2 selected letters");
        let letters = target.letters.expect("letters");
        assert_eq!(letters[&0], BTreeSet::from([5]));
        let params = Params::parse(b"action=skip&scope=filter&reason=rejected&since=1h");
        let target = target_of(&params).expect("a target");
        assert_eq!(target.action, Action::Skip);
        assert!(target.letters.is_none());
        assert_eq!(
            target.what,
            "all letters with reason rejected written since 1h"
        );
        assert!(target.fields.contains(&("reason", "rejected".to_owned())));
        for bad in [
            &b"do=replay-selected"[..],
            b"do=drop-selected&letter=0:1",
            b"do=replay-selected&letter=x",
            b"do=replay-selected&letter=0:-4",
            b"do=replay-everything",
        ] {
            assert!(target_of(&Params::parse(bad)).is_err(), "{bad:?}");
        }
    }
}
