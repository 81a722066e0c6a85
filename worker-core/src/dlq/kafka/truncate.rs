//! How a letter too large for the dead-letter topic is cut: a pure plan over sizes.
//!
//! The value goes first (to the room the producer's own `message.max.bytes` leaves, or half of what
//! was refused last, whichever is smaller); when even an empty value does not fit, the record's
//! own headers are dropped (the provenance headers always stay), and then the key is cut. Every
//! step is strictly smaller than the one before, so the plan ends.

/// Bytes a record batch of one record needs besides the record's key, value and headers: the batch
/// header (61) and the record's framing with every varint at its widest (36, librdkafka's
/// `RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD`).
pub(super) const RECORD_OVERHEAD: usize = 61 + 36;
/// Bytes one header needs besides its key and value: two varints at their widest.
pub(super) const HEADER_OVERHEAD: usize = 10;
/// Kept free below the limit, so that a cut letter fits even when an estimate falls a little short.
pub(super) const SAFETY_MARGIN: usize = 512;
/// A value or key at most this long is cut to nothing instead of halved again.
const MIN_PART: usize = 64;

/// The bytes a header takes in a record, at most.
pub(super) fn header_size(key: usize, value: usize) -> usize {
    HEADER_OVERHEAD + key + value
}

/// The sizes of a letter's parts, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Sizes {
    /// The record's key.
    pub(super) key: usize,
    /// The record's value.
    pub(super) value: usize,
    /// The record's own headers, as written.
    pub(super) own_headers: usize,
    /// The provenance headers, as written on a truncated letter (with `share.dlq.truncated` and
    /// `share.dlq.original.size`).
    pub(super) provenance: usize,
}

/// What a letter keeps: the first `key` bytes of the key, the first `value` bytes of the value,
/// and the record's own headers or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Cut {
    pub(super) key: usize,
    pub(super) value: usize,
    pub(super) own_headers: bool,
}

impl Cut {
    /// The whole letter.
    pub(super) fn whole(sizes: &Sizes) -> Self {
        Self {
            key: sizes.key,
            value: sizes.value,
            own_headers: true,
        }
    }

    /// The most bytes this letter takes as a record batch of its own (the provenance headers
    /// counted as on a truncated letter).
    pub(super) fn wire_size(&self, sizes: &Sizes) -> usize {
        let own_headers = if self.own_headers {
            sizes.own_headers
        } else {
            0
        };
        RECORD_OVERHEAD + sizes.provenance + own_headers + self.key + self.value
    }
}

/// The next, smaller letter after `refused` was too large, fitting `limit` (the producer's
/// `message.max.bytes`) with the safety margin; `None` when nothing is left to cut.
pub(super) fn next_cut(sizes: &Sizes, refused: Cut, limit: usize) -> Option<Cut> {
    let mut cut = refused;
    loop {
        cut = step(sizes, cut, limit)?;
        if cut.wire_size(sizes) + SAFETY_MARGIN <= limit {
            return Some(cut);
        }
    }
}

/// One step smaller than `cut`: value, then the record's headers, then the key.
fn step(sizes: &Sizes, cut: Cut, limit: usize) -> Option<Cut> {
    let own_headers = if cut.own_headers {
        sizes.own_headers
    } else {
        0
    };
    let room = |fixed: usize| limit.saturating_sub(SAFETY_MARGIN + RECORD_OVERHEAD + fixed);
    // Whether something besides `fixed` bytes fits at all.
    let fits_empty = |fixed: usize| fixed + SAFETY_MARGIN + RECORD_OVERHEAD < limit;
    let fixed = sizes.provenance + own_headers + cut.key;
    if cut.value > 0 && fits_empty(fixed) {
        return Some(Cut {
            value: shrink(cut.value, room(fixed)),
            ..cut
        });
    }
    if cut.own_headers && sizes.own_headers > 0 {
        let fixed = sizes.provenance + cut.key;
        return Some(Cut {
            own_headers: false,
            value: if fits_empty(fixed) {
                cut.value.min(room(fixed))
            } else {
                cut.value
            },
            ..cut
        });
    }
    if cut.key > 0 {
        let value = if fits_empty(sizes.provenance + cut.value) {
            cut.value
        } else {
            0
        };
        return Some(Cut {
            key: shrink(cut.key, room(sizes.provenance + value)),
            value,
            own_headers: false,
        });
    }
    if cut.value > 0 {
        return Some(Cut { value: 0, ..cut });
    }
    None
}

/// Smaller than `len`: `room` when that is smaller, otherwise half (nothing once it is short).
fn shrink(len: usize, room: usize) -> usize {
    if room < len {
        room
    } else if len <= MIN_PART {
        0
    } else {
        len / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 1_000_000;

    fn sizes(key: usize, value: usize, own_headers: usize) -> Sizes {
        Sizes {
            key,
            value,
            own_headers,
            provenance: 600,
        }
    }

    fn plan(sizes: &Sizes, limit: usize) -> Vec<Cut> {
        let mut cuts = Vec::new();
        let mut cut = Cut::whole(sizes);
        while let Some(next) = next_cut(sizes, cut, limit) {
            assert!(
                next.wire_size(sizes) + SAFETY_MARGIN <= limit,
                "{next:?} must fit {limit}"
            );
            cuts.push(next);
            cut = next;
        }
        cuts
    }

    #[test]
    fn a_value_over_the_producer_limit_is_cut_to_fit_it_at_once() {
        let s = sizes(10, 2 << 20, 30);
        let first = next_cut(&s, Cut::whole(&s), LIMIT).unwrap();
        assert_eq!(
            first,
            Cut {
                key: 10,
                value: LIMIT - SAFETY_MARGIN - RECORD_OVERHEAD - 600 - 30 - 10,
                own_headers: true,
            }
        );
    }

    #[test]
    fn a_value_under_the_producer_limit_is_halved_each_time_the_topic_refuses_it() {
        let s = sizes(10, 51_200, 30);
        let cuts = plan(&s, LIMIT);
        let values: Vec<usize> = cuts.iter().map(|c| c.value).collect();
        assert_eq!(
            values[..11],
            [
                25_600, 12_800, 6_400, 3_200, 1_600, 800, 400, 200, 100, 50, 0
            ],
            "{values:?}"
        );
        assert_eq!(
            cuts.len(),
            13,
            "then the headers go, then the key: {cuts:?}"
        );
        let last = plan(&s, LIMIT).pop().unwrap();
        assert_eq!(
            last,
            Cut {
                key: 0,
                value: 0,
                own_headers: false
            }
        );
    }

    #[test]
    fn huge_headers_go_before_the_value_when_even_an_empty_value_cannot_fit() {
        let s = sizes(10, 5_000, 2 << 20);
        let first = next_cut(&s, Cut::whole(&s), LIMIT).unwrap();
        assert_eq!(
            first,
            Cut {
                key: 10,
                value: 5_000,
                own_headers: false
            },
            "the value is kept whole"
        );
    }

    #[test]
    fn a_huge_key_is_cut_last() {
        let s = sizes(2 << 20, 100, 30);
        let first = next_cut(&s, Cut::whole(&s), LIMIT).unwrap();
        assert!(!first.own_headers);
        assert_eq!(first.value, 100, "{first:?}");
        assert_eq!(
            first.key,
            LIMIT - SAFETY_MARGIN - RECORD_OVERHEAD - 600 - 100,
            "{first:?}"
        );
    }

    #[test]
    fn a_huge_key_beside_a_huge_value_keeps_a_prefix_of_the_key_only() {
        let s = sizes(3_000_000, 3_000_000, 30);
        assert_eq!(
            next_cut(&s, Cut::whole(&s), LIMIT),
            Some(Cut {
                key: LIMIT - SAFETY_MARGIN - RECORD_OVERHEAD - 600,
                value: 0,
                own_headers: false
            })
        );
    }

    #[test]
    fn nothing_fits_when_the_provenance_alone_is_too_large() {
        let s = sizes(10, 100, 30);
        assert_eq!(next_cut(&s, Cut::whole(&s), 900), None);
    }

    #[test]
    fn every_plan_shrinks_and_ends() {
        for (key, value, own_headers) in [
            (0, 0, 0),
            (0, 1, 0),
            (5, 70_000, 0),
            (3_000_000, 3_000_000, 3_000_000),
            (100, 0, 2_000_000),
        ] {
            let s = sizes(key, value, own_headers);
            let cuts = plan(&s, LIMIT);
            assert!(cuts.len() < 80, "{s:?}: {} cuts", cuts.len());
            let mut previous = Cut::whole(&s);
            for cut in cuts {
                assert!(
                    cut.wire_size(&s) < previous.wire_size(&s),
                    "{previous:?} -> {cut:?}"
                );
                previous = cut;
            }
        }
    }
}
