use super::*;

const MAX_TIMEOUT: i32 = 900_000;

fn pids(start: i64) -> impl FnMut() -> i64 {
    let mut next = start;
    move || {
        next += 1;
        next - 1
    }
}

fn no_pid() -> i64 {
    panic!("no new producer id expected")
}

fn ready(outcome: Result<InitOutcome, TxnError>) -> TxnMetadata {
    match outcome {
        Ok(InitOutcome::Ready(m)) => m,
        other => panic!("expected Ready, got {other:?}"),
    }
}

fn prepared(outcome: Result<EndOutcome, TxnError>) -> TxnMetadata {
    match outcome {
        Ok(EndOutcome::Prepare(m)) => m,
        other => panic!("expected Prepare, got {other:?}"),
    }
}

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

/// A fresh id: pid 7, epoch 0, Empty, at t=1000.
fn fresh() -> TxnMetadata {
    ready(init_producer_id(
        None,
        60_000,
        MAX_TIMEOUT,
        None,
        1000,
        &mut pids(7),
    ))
}

/// A fresh id with one partition added at t=2000.
fn ongoing() -> TxnMetadata {
    add_partitions(Some(&fresh()), 7, 0, &[tp("t", 0)], 2000).unwrap()
}

/// An idle id at this epoch.
fn idle_at(epoch: i16) -> TxnMetadata {
    TxnMetadata {
        producer_epoch: epoch,
        ..fresh()
    }
}

#[test]
fn new_id_gets_new_pid_at_epoch_zero() {
    let m = fresh();
    assert_eq!(m.producer_id, 7);
    assert_eq!(m.producer_epoch, 0);
    assert_eq!(m.last_producer_epoch, -1);
    assert_eq!(m.state, TxnState::Empty);
    assert_eq!(m.timeout_ms, 60_000);
    assert_eq!(m.txn_start_ms, -1);
    assert_eq!(m.last_update_ms, 1000);
    // A Dead id is as good as none; an expected producer does not matter.
    let dead = TxnMetadata {
        state: TxnState::Dead,
        ..fresh()
    };
    let m = ready(init_producer_id(
        Some(&dead),
        1,
        MAX_TIMEOUT,
        Some((3, 9)),
        5,
        &mut pids(50),
    ));
    assert_eq!((m.producer_id, m.producer_epoch), (50, 0));
}

#[test]
fn init_rejects_timeouts_out_of_range() {
    for t in [0, -1, MAX_TIMEOUT + 1] {
        assert_eq!(
            init_producer_id(None, t, MAX_TIMEOUT, None, 0, &mut no_pid),
            Err(TxnError::InvalidTransactionTimeout)
        );
    }
    assert!(init_producer_id(None, MAX_TIMEOUT, MAX_TIMEOUT, None, 0, &mut pids(1)).is_ok());
}

#[test]
fn init_bumps_epoch_and_fences_the_old_producer() {
    let old = fresh();
    let new = ready(init_producer_id(
        Some(&old),
        30_000,
        MAX_TIMEOUT,
        None,
        3000,
        &mut no_pid,
    ));
    assert_eq!((new.producer_id, new.producer_epoch), (7, 1));
    assert_eq!(new.last_producer_epoch, -1);
    assert_eq!(new.timeout_ms, 30_000);
    assert_eq!(
        add_partitions(Some(&new), 7, 0, &[tp("t", 0)], 3001),
        Err(TxnError::Fenced)
    );
    assert_eq!(
        add_offsets(Some(&new), 7, 0, "g", 3001),
        Err(TxnError::Fenced)
    );
    assert_eq!(end_txn(Some(&new), 7, 0, true, 3001), Err(TxnError::Fenced));
    // A newer epoch than the coordinator's is refused the same way.
    assert_eq!(end_txn(Some(&new), 7, 2, true, 3001), Err(TxnError::Fenced));
    // After a completed transaction too.
    let done = complete(
        &prepared(end_txn(Some(&ongoing()), 7, 0, false, 3000)),
        3001,
    );
    let new = ready(init_producer_id(
        Some(&done),
        30_000,
        MAX_TIMEOUT,
        None,
        3002,
        &mut no_pid,
    ));
    assert_eq!((new.state, new.producer_epoch), (TxnState::Empty, 1));
    assert!(new.partitions.is_empty() && new.groups.is_empty());
    assert_eq!(new.txn_start_ms, -1);
}

#[test]
fn init_with_ongoing_transaction_aborts_it_first() {
    let mut cur = ongoing();
    cur.groups.insert("g".into());
    let abort = match init_producer_id(Some(&cur), 1, MAX_TIMEOUT, None, 5000, &mut no_pid) {
        Ok(InitOutcome::AbortFirst(m)) => m,
        other => panic!("{other:?}"),
    };
    assert_eq!(abort.state, TxnState::PrepareAbort);
    assert_eq!(abort.producer_epoch, 1);
    assert_eq!(abort.last_producer_epoch, -1);
    assert_eq!(abort.partitions, cur.partitions);
    assert_eq!(abort.groups, cur.groups);
    // The request's timeout applies on the retry, not to the abort.
    assert_eq!(abort.timeout_ms, cur.timeout_ms);
    // The old producer is fenced; the retry waits for the abort...
    assert_eq!(
        end_txn(Some(&abort), 7, 0, true, 5001),
        Err(TxnError::Fenced)
    );
    assert_eq!(
        init_producer_id(Some(&abort), 1, MAX_TIMEOUT, None, 5001, &mut no_pid),
        Err(TxnError::ConcurrentTransactions)
    );
    // ...then gets the epoch bumped once more.
    let done = complete(&abort, 5002);
    assert_eq!(done.state, TxnState::CompleteAbort);
    let m = ready(init_producer_id(
        Some(&done),
        1,
        MAX_TIMEOUT,
        None,
        5003,
        &mut no_pid,
    ));
    assert_eq!((m.producer_id, m.producer_epoch, m.timeout_ms), (7, 2, 1));
}

#[test]
fn init_in_prepare_states_is_concurrent() {
    for commit in [true, false] {
        let p = prepared(end_txn(Some(&ongoing()), 7, 0, commit, 3000));
        assert_eq!(
            init_producer_id(Some(&p), 1, MAX_TIMEOUT, None, 3001, &mut no_pid),
            Err(TxnError::ConcurrentTransactions)
        );
        assert_eq!(
            init_producer_id(Some(&p), 1, MAX_TIMEOUT, Some((7, 0)), 3001, &mut no_pid),
            Err(TxnError::ConcurrentTransactions)
        );
    }
}

#[test]
fn init_with_expected_producer_follows_kip_360() {
    let cur = fresh();
    let init = |m: &TxnMetadata, expected| {
        init_producer_id(Some(m), 1, MAX_TIMEOUT, Some(expected), 9, &mut no_pid)
    };
    // The current epoch: bumped, and the last epoch remembered.
    let bumped = ready(init(&cur, (7, 0)));
    assert_eq!((bumped.producer_epoch, bumped.last_producer_epoch), (1, 0));
    // A retry of that call: the same epoch, not bumped again.
    let retried = ready(init(&bumped, (7, 0)));
    assert_eq!(
        (retried.producer_epoch, retried.last_producer_epoch),
        (1, 0)
    );
    // Neither the current nor the last epoch: fenced.
    assert_eq!(init(&bumped, (7, 5)), Err(TxnError::Fenced));
    // Another producer's InitProducerId (no expected) resets the last
    // epoch: the old producer's retry is fenced.
    let other = ready(init_producer_id(
        Some(&bumped),
        1,
        MAX_TIMEOUT,
        None,
        9,
        &mut no_pid,
    ));
    assert_eq!((other.producer_epoch, other.last_producer_epoch), (2, -1));
    assert_eq!(init(&other, (7, 0)), Err(TxnError::Fenced));
    assert_eq!(init(&other, (7, 1)), Err(TxnError::Fenced));
    // Another producer id: fenced.
    assert_eq!(init(&cur, (8, 0)), Err(TxnError::Fenced));
}

#[test]
fn epoch_overflow_rotates_the_producer_id() {
    // MAX - 2 is not exhausted: bumped to MAX - 1.
    let m = ready(init_producer_id(
        Some(&idle_at(i16::MAX - 2)),
        1,
        MAX_TIMEOUT,
        None,
        9,
        &mut no_pid,
    ));
    assert_eq!((m.producer_id, m.producer_epoch), (7, i16::MAX - 1));
    // MAX - 1 (and MAX, after a fence) are: a new producer id at 0.
    for epoch in [i16::MAX - 1, i16::MAX] {
        let m = ready(init_producer_id(
            Some(&idle_at(epoch)),
            1,
            MAX_TIMEOUT,
            None,
            9,
            &mut pids(100),
        ));
        assert_eq!(
            (m.producer_id, m.producer_epoch, m.last_producer_epoch),
            (100, 0, -1)
        );
        assert_eq!(m.previous_producer_id, 7);
    }
    // With the expected producer (KIP-360) the old epoch is remembered,
    // so the retry of the rotation gets the same new producer id.
    let cur = idle_at(i16::MAX - 1);
    let rotated = ready(init_producer_id(
        Some(&cur),
        1,
        MAX_TIMEOUT,
        Some((7, i16::MAX - 1)),
        9,
        &mut pids(100),
    ));
    assert_eq!((rotated.producer_id, rotated.producer_epoch), (100, 0));
    assert_eq!(rotated.last_producer_epoch, i16::MAX - 1);
    let retry = ready(init_producer_id(
        Some(&rotated),
        1,
        MAX_TIMEOUT,
        Some((7, i16::MAX - 1)),
        10,
        &mut no_pid,
    ));
    assert_eq!((retry.producer_id, retry.producer_epoch), (100, 0));
    // The old producer id with an epoch that is not exhausted: fenced.
    assert_eq!(
        init_producer_id(
            Some(&rotated),
            1,
            MAX_TIMEOUT,
            Some((7, 3)),
            10,
            &mut no_pid
        ),
        Err(TxnError::Fenced)
    );
    // An exhausted epoch with a stale expected epoch that is its last one:
    // a retry, answered without a bump (Kafka throws here).
    let at_max = TxnMetadata {
        last_producer_epoch: i16::MAX - 2,
        ..idle_at(i16::MAX - 1)
    };
    let m = ready(init_producer_id(
        Some(&at_max),
        1,
        MAX_TIMEOUT,
        Some((7, i16::MAX - 2)),
        9,
        &mut no_pid,
    ));
    assert_eq!((m.producer_id, m.producer_epoch), (7, i16::MAX - 1));
}

#[test]
fn add_partitions_opens_and_extends_the_transaction() {
    let m = ongoing();
    assert_eq!(m.state, TxnState::Ongoing);
    assert_eq!(m.txn_start_ms, 2000);
    assert_eq!(m.partitions, BTreeSet::from([tp("t", 0)]));
    let m2 = add_partitions(Some(&m), 7, 0, &[tp("t", 1), tp("u", 0)], 2500).unwrap();
    assert_eq!(m2.txn_start_ms, 2000);
    assert_eq!(m2.last_update_ms, 2500);
    assert_eq!(m2.partitions.len(), 3);
    // Already there: unchanged, nothing to persist.
    let same = add_partitions(Some(&m2), 7, 0, &[tp("u", 0)], 2600).unwrap();
    assert_eq!(same, m2);
    // After a completed transaction a new one starts from nothing.
    let mut with_group = m2.clone();
    with_group.groups.insert("g".into());
    let done = complete(
        &prepared(end_txn(Some(&with_group), 7, 0, true, 3000)),
        3100,
    );
    assert!(done.partitions.is_empty() && done.groups.is_empty());
    assert_eq!(done.txn_start_ms, 2000);
    let next = add_partitions(Some(&done), 7, 0, &[tp("v", 2)], 4000).unwrap();
    assert_eq!(next.state, TxnState::Ongoing);
    assert_eq!(next.txn_start_ms, 4000);
    assert_eq!(next.partitions, BTreeSet::from([tp("v", 2)]));
    assert!(next.groups.is_empty());
}

#[test]
fn add_partitions_refusals() {
    let parts = [tp("t", 0)];
    assert_eq!(
        add_partitions(None, 7, 0, &parts, 1),
        Err(TxnError::InvalidProducerIdMapping)
    );
    let dead = TxnMetadata {
        state: TxnState::Dead,
        ..fresh()
    };
    assert_eq!(
        add_partitions(Some(&dead), 7, 0, &parts, 1),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(
        add_partitions(Some(&fresh()), 8, 0, &parts, 1),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(
        add_partitions(Some(&fresh()), 7, 1, &parts, 1),
        Err(TxnError::Fenced)
    );
    for commit in [true, false] {
        let p = prepared(end_txn(Some(&ongoing()), 7, 0, commit, 3000));
        assert_eq!(
            add_partitions(Some(&p), 7, 0, &parts, 3001),
            Err(TxnError::ConcurrentTransactions)
        );
        assert_eq!(
            add_offsets(Some(&p), 7, 0, "g", 3001),
            Err(TxnError::ConcurrentTransactions)
        );
    }
}

#[test]
fn add_offsets_adds_the_group() {
    let m = add_offsets(Some(&fresh()), 7, 0, "g", 2000).unwrap();
    assert_eq!(m.state, TxnState::Ongoing);
    assert_eq!(m.txn_start_ms, 2000);
    assert_eq!(m.groups, BTreeSet::from(["g".to_owned()]));
    assert!(m.partitions.is_empty());
    let m2 = add_offsets(Some(&m), 7, 0, "h", 2100).unwrap();
    assert_eq!(m2.groups.len(), 2);
    assert_eq!(m2.txn_start_ms, 2000);
    assert_eq!(add_offsets(Some(&m2), 7, 0, "h", 2200).unwrap(), m2);
    assert_eq!(
        add_offsets(None, 7, 0, "g", 1),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(add_offsets(Some(&m2), 7, 1, "g", 1), Err(TxnError::Fenced));
    assert!(group_in_transaction(Some(&m2), 7, 0, "h"));
    assert!(!group_in_transaction(Some(&m2), 7, 0, "x"));
    assert!(!group_in_transaction(Some(&m2), 7, 1, "h"));
}

#[test]
fn in_transaction_checks_producer_state_and_partition() {
    let m = ongoing();
    assert!(in_transaction(Some(&m), 7, 0, "t", 0));
    assert!(!in_transaction(Some(&m), 7, 0, "t", 1));
    assert!(!in_transaction(Some(&m), 7, 1, "t", 0));
    assert!(!in_transaction(Some(&m), 8, 0, "t", 0));
    assert!(!in_transaction(None, 7, 0, "t", 0));
    let p = prepared(end_txn(Some(&m), 7, 0, true, 3000));
    assert!(!in_transaction(Some(&p), 7, 0, "t", 0));
}

#[test]
fn end_txn_prepares_then_completes() {
    for (commit, prep, done) in [
        (true, TxnState::PrepareCommit, TxnState::CompleteCommit),
        (false, TxnState::PrepareAbort, TxnState::CompleteAbort),
    ] {
        let cur = ongoing();
        let p = prepared(end_txn(Some(&cur), 7, 0, commit, 3000));
        assert_eq!(p.state, prep);
        assert_eq!(
            (p.producer_epoch, p.partitions.clone()),
            (0, cur.partitions.clone())
        );
        assert_eq!(p.last_update_ms, 3000);
        let c = complete(&p, 3100);
        assert_eq!(c.state, done);
        assert_eq!(
            (c.producer_id, c.producer_epoch, c.last_producer_epoch),
            (7, 0, 0)
        );
        assert!(c.partitions.is_empty() && c.groups.is_empty());
        assert_eq!((c.txn_start_ms, c.last_update_ms), (2000, 3100));
        // Nothing to complete elsewhere.
        assert_eq!(complete(&c, 3200), c);
    }
    // An empty transaction still goes through Prepare, as Kafka.
    let empty = add_offsets(Some(&fresh()), 7, 0, "g", 2000).unwrap();
    let mut empty = empty;
    empty.groups.clear();
    let p = prepared(end_txn(Some(&empty), 7, 0, true, 3000));
    assert!(p.partitions.is_empty() && p.groups.is_empty());
}

#[test]
fn end_txn_retry_after_completion_succeeds() {
    let commit = complete(&prepared(end_txn(Some(&ongoing()), 7, 0, true, 3000)), 3001);
    assert_eq!(
        end_txn(Some(&commit), 7, 0, true, 3002),
        Ok(EndOutcome::AlreadyDone)
    );
    let abort = complete(
        &prepared(end_txn(Some(&ongoing()), 7, 0, false, 3000)),
        3001,
    );
    assert_eq!(
        end_txn(Some(&abort), 7, 0, false, 3002),
        Ok(EndOutcome::AlreadyDone)
    );
    // A retry from the fenced epoch is not a retry.
    assert_eq!(
        end_txn(Some(&abort), 7, 1, false, 3002),
        Err(TxnError::Fenced)
    );
}

#[test]
fn end_txn_the_other_way_after_completion_is_invalid() {
    let commit = complete(&prepared(end_txn(Some(&ongoing()), 7, 0, true, 3000)), 3001);
    assert_eq!(
        end_txn(Some(&commit), 7, 0, false, 3002),
        Err(TxnError::InvalidTxnState)
    );
    let abort = complete(
        &prepared(end_txn(Some(&ongoing()), 7, 0, false, 3000)),
        3001,
    );
    assert_eq!(
        end_txn(Some(&abort), 7, 0, true, 3002),
        Err(TxnError::InvalidTxnState)
    );
}

#[test]
fn end_txn_in_prepare_states() {
    let pc = prepared(end_txn(Some(&ongoing()), 7, 0, true, 3000));
    assert_eq!(
        end_txn(Some(&pc), 7, 0, true, 3001),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        end_txn(Some(&pc), 7, 0, false, 3001),
        Err(TxnError::InvalidTxnState)
    );
    let pa = prepared(end_txn(Some(&ongoing()), 7, 0, false, 3000));
    assert_eq!(
        end_txn(Some(&pa), 7, 0, false, 3001),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        end_txn(Some(&pa), 7, 0, true, 3001),
        Err(TxnError::InvalidTxnState)
    );
}

#[test]
fn end_txn_refusals() {
    assert_eq!(
        end_txn(Some(&fresh()), 7, 0, true, 1),
        Err(TxnError::InvalidTxnState)
    );
    assert_eq!(
        end_txn(Some(&fresh()), 7, 0, false, 1),
        Err(TxnError::InvalidTxnState)
    );
    assert_eq!(
        end_txn(None, 7, 0, true, 1),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(
        end_txn(Some(&ongoing()), 8, 0, true, 1),
        Err(TxnError::InvalidProducerIdMapping)
    );
    let dead = TxnMetadata {
        state: TxnState::Dead,
        ..fresh()
    };
    assert_eq!(
        end_txn(Some(&dead), 7, 0, true, 1),
        Err(TxnError::InvalidProducerIdMapping)
    );
}

#[test]
fn timeout_aborts_and_bumps_the_epoch() {
    let m = ongoing(); // started at 2000, timeout 60 000
    assert_eq!(timed_out(&m, 62_000), None);
    let abort = timed_out(&m, 62_001).unwrap();
    assert_eq!(abort.state, TxnState::PrepareAbort);
    assert_eq!((abort.producer_id, abort.producer_epoch), (7, 1));
    assert_eq!(abort.last_producer_epoch, -1);
    assert_eq!(abort.partitions, m.partitions);
    assert_eq!(abort.last_update_ms, 62_001);
    // The producer is fenced: its commit and its next add are refused.
    assert_eq!(
        end_txn(Some(&abort), 7, 0, true, 62_002),
        Err(TxnError::Fenced)
    );
    let done = complete(&abort, 62_003);
    assert_eq!(done.state, TxnState::CompleteAbort);
    assert_eq!(
        add_partitions(Some(&done), 7, 0, &[tp("t", 0)], 62_004),
        Err(TxnError::Fenced)
    );
    // Only Ongoing transactions time out.
    assert_eq!(timed_out(&done, i64::MAX), None);
    assert_eq!(timed_out(&fresh(), i64::MAX), None);
}

#[test]
fn timeout_at_the_last_epoch_does_not_overflow() {
    // A client has at most MAX - 1; the fence takes it to MAX, and the
    // next InitProducerId rotates.
    let m = TxnMetadata {
        producer_epoch: i16::MAX - 1,
        ..ongoing()
    };
    let abort = timed_out(&m, i64::MAX).unwrap();
    assert_eq!(abort.producer_epoch, i16::MAX);
    let done = complete(&abort, 1);
    let m2 = ready(init_producer_id(
        Some(&done),
        1,
        MAX_TIMEOUT,
        None,
        2,
        &mut pids(40),
    ));
    assert_eq!((m2.producer_id, m2.producer_epoch), (40, 0));
    // At MAX (a bug elsewhere) it aborts without the bump, as Kafka 4.x.
    let broken = TxnMetadata {
        producer_epoch: i16::MAX,
        ..ongoing()
    };
    assert_eq!(
        timed_out(&broken, i64::MAX).unwrap().producer_epoch,
        i16::MAX
    );
}

#[test]
fn idle_ids_expire() {
    let m = fresh(); // last update 1000
    assert!(!expired(&m, 1000 + 604_800_000 - 1, 604_800_000));
    assert!(expired(&m, 1000 + 604_800_000, 604_800_000));
    assert!(!expired(&ongoing(), i64::MAX, 1));
    let p = prepared(end_txn(Some(&ongoing()), 7, 0, true, 3000));
    assert!(!expired(&p, i64::MAX, 1));
    assert!(expired(&complete(&p, 3001), i64::MAX, 1));
    assert!(!expired(&m, i64::MIN, i64::MAX));
}

#[test]
fn describe_finds_live_ids_only() {
    let m = fresh();
    assert_eq!(describe(Some(&m)), Ok(&m));
    assert_eq!(describe(None), Err(TxnError::TransactionalIdNotFound));
    let dead = TxnMetadata {
        state: TxnState::Dead,
        ..fresh()
    };
    assert_eq!(
        describe(Some(&dead)),
        Err(TxnError::TransactionalIdNotFound)
    );
    assert_eq!(TxnError::TransactionalIdNotFound.code(true).code(), 105);
}

#[test]
fn error_codes_and_fenced_versions() {
    assert_eq!(TxnError::ConcurrentTransactions.code(false).code(), 51);
    assert_eq!(TxnError::Fenced.code(true).code(), 90);
    assert_eq!(TxnError::Fenced.code(false).code(), 47);
    assert_eq!(TxnError::InvalidProducerIdMapping.code(true).code(), 49);
    assert_eq!(TxnError::InvalidTxnState.code(true).code(), 48);
    assert_eq!(TxnError::InvalidTransactionTimeout.code(true).code(), 50);
    for (api, first) in [
        (TxnApi::InitProducerId, 4),
        (TxnApi::AddPartitionsToTxn, 2),
        (TxnApi::AddOffsetsToTxn, 2),
        (TxnApi::EndTxn, 2),
    ] {
        assert_eq!(fenced_code(api, first - 1).code(), 47);
        assert_eq!(fenced_code(api, first).code(), 90);
        assert_eq!(TxnError::Fenced.code_for(api, first).code(), 90);
    }
    for v in 0..12 {
        assert_eq!(fenced_code(TxnApi::TxnOffsetCommit, v).code(), 47);
        assert_eq!(fenced_code(TxnApi::Produce, v).code(), 47);
    }
    assert_eq!(
        TxnError::InvalidTxnState.code_for(TxnApi::EndTxn, 0).code(),
        48
    );
}

#[test]
fn state_ids_and_names() {
    for id in 0..=6 {
        assert_eq!(TxnState::from_id(id).unwrap().id(), id);
    }
    assert_eq!(TxnState::from_id(7), None);
    assert_eq!(TxnState::PrepareCommit.name(), "PrepareCommit");
}

fn sample() -> TxnMetadata {
    let mut m = ongoing();
    m.partitions.insert(tp("ünïcode", i32::MAX));
    m.partitions.insert(tp("", -1));
    m.groups.insert("g".into());
    m.groups.insert(String::new());
    m.previous_producer_id = -1;
    m.last_producer_epoch = i16::MIN;
    m.last_update_ms = i64::MIN;
    m
}

#[test]
fn encode_decode_round_trip() {
    let samples = [
        sample(),
        fresh(),
        complete(&prepared(end_txn(Some(&ongoing()), 7, 0, false, 3)), 4),
        TxnMetadata {
            state: TxnState::Dead,
            ..fresh()
        },
    ];
    for m in samples {
        assert_eq!(TxnMetadata::decode(&m.encode()), Some(m));
    }
}

#[test]
fn every_truncation_decodes_to_none() {
    let bytes = sample().encode();
    for len in 0..bytes.len() {
        assert_eq!(TxnMetadata::decode(&bytes[..len]), None, "length {len}");
    }
}

#[test]
fn malformed_encodings_decode_to_none() {
    let good = sample().encode();
    // Another format, trailing bytes.
    let mut b = good.clone();
    b[0] = 1;
    assert_eq!(TxnMetadata::decode(&b), None);
    let mut b = good.clone();
    b.push(0);
    assert_eq!(TxnMetadata::decode(&b), None);
    // An unknown state (its byte follows 1 + 8 + 8 + 2 + 2 + 4).
    let mut b = fresh().encode();
    b[25] = 7;
    assert_eq!(TxnMetadata::decode(&b), None);
    // A huge count or length with nothing behind it.
    let mut b = fresh().encode();
    let n = b.len();
    b[n - 8..n - 4].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(TxnMetadata::decode(&b), None);
    // Bad UTF-8 in a group; a group listed twice.
    let mut m = fresh();
    m.groups.insert("a".into());
    let mut b = m.encode();
    *b.last_mut().unwrap() = 0xff;
    assert_eq!(TxnMetadata::decode(&b), None);
    let mut b = m.encode();
    let n = b.len();
    b[n - 9..n - 5].copy_from_slice(&2u32.to_be_bytes());
    b.extend_from_slice(&[0, 0, 0, 1, b'a']);
    assert_eq!(TxnMetadata::decode(&b), None);
    // Arbitrary bytes and bit flips never panic.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut b = good.clone();
        let i = (x % b.len() as u64) as usize;
        b[i] ^= (x >> 32) as u8 | 1;
        let _ = TxnMetadata::decode(&b);
        let junk: Vec<u8> = (0..(x % 64)).map(|k| (x >> (k % 56)) as u8).collect();
        let _ = TxnMetadata::decode(&junk);
    }
}
