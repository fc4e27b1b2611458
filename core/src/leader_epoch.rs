//! Leader epochs as clients see them (KIP-101, KIP-279, KIP-320). A
//! partition's leader epoch counts its leaders; a client names the epoch it
//! knows (`current_leader_epoch`) so a deposed or not yet informed leader
//! refuses it, and asks where an epoch ended (OffsetForLeaderEpoch) to find
//! whether the log it read was truncated since.
//!
//! Until partitions are replicated a partition's leader never moves: every
//! partition is in epoch 0 from its log start (what Metadata and ListOffsets
//! tell), so its epoch cache is that one entry and the answers follow
//! Kafka's `LeaderEpochFileCache.endOffsetFor` over it.

use crate::error::{ErrorCode, KafkaError};

/// Every partition's leader epoch, and its only one so far: the one its
/// stored batches carry.
pub const CURRENT: i32 = weir_storage::batch::LEADER_EPOCH;

/// "No epoch": a client that does not know or check one (KIP-320's -1).
pub const UNDEFINED: i32 = -1;

/// KIP-320: a request naming a leader epoch is served only by the leader
/// of that epoch (`current`): an older one is FENCED_LEADER_EPOCH (the
/// client's leader was replaced), a newer one UNKNOWN_LEADER_EPOCH (this
/// node has not heard of it yet). `UNDEFINED` is not checked.
pub fn check(topic: &str, partition: i32, asked: i32, current: i32) -> Result<(), KafkaError> {
    let (code, why) = match asked {
        UNDEFINED => return Ok(()),
        a if a == current => return Ok(()),
        a if a < current => (ErrorCode::FencedLeaderEpoch, "older than"),
        _ => (ErrorCode::UnknownLeaderEpoch, "newer than"),
    };
    Err(KafkaError::new(
        code,
        format!("{topic}-{partition}: leader epoch {asked} is {why} this leader's ({current})"),
    ))
}

/// `check` against a partition not replicated (epoch `CURRENT`).
pub fn check_current(topic: &str, partition: i32, asked: i32) -> Result<(), KafkaError> {
    check(topic, partition, asked, CURRENT)
}

/// OffsetForLeaderEpoch, as Kafka's `LeaderEpochFileCache.endOffsetFor`
/// answers over one epoch that began at the log start: the current epoch
/// ends at the log end; one newer than any (or `UNDEFINED`) has no end,
/// `(UNDEFINED, -1)`; one older than the first ended where the first began.
pub fn end_offset_for(asked: i32, log_start: i64, log_end: i64) -> (i32, i64) {
    match asked {
        CURRENT => (CURRENT, log_end),
        UNDEFINED => (UNDEFINED, -1),
        a if a > CURRENT => (UNDEFINED, -1),
        a => (a, log_start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_epoch_is_served_and_others_fenced_or_unknown() {
        assert!(check_current("t", 0, UNDEFINED).is_ok());
        assert!(check_current("t", 0, CURRENT).is_ok());
        assert_eq!(
            check_current("t", 0, CURRENT + 1).unwrap_err().code,
            ErrorCode::UnknownLeaderEpoch
        );
        assert_eq!(
            check_current("t", 0, UNDEFINED - 1).unwrap_err().code,
            ErrorCode::FencedLeaderEpoch,
            "an epoch below every real one (epochs start at 0) is fenced"
        );
    }

    #[test]
    fn end_offsets_follow_kafkas_epoch_cache() {
        assert_eq!(end_offset_for(CURRENT, 5, 42), (CURRENT, 42));
        assert_eq!(end_offset_for(CURRENT + 3, 5, 42), (UNDEFINED, -1));
        assert_eq!(end_offset_for(UNDEFINED, 5, 42), (UNDEFINED, -1));
        assert_eq!(end_offset_for(-7, 5, 42), (-7, 5));
    }
}
