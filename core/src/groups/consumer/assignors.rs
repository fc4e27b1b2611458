//! The server-side assignors a consumer group may use (`uniform`, the
//! default, and `range`): every member's target assignment from the
//! members' subscriptions and the topics' partition counts.

use std::collections::{BTreeMap, BTreeSet};

use super::{Member, Tp};

/// An empty assignment for every member.
fn nothing(members: &BTreeMap<String, Member>) -> BTreeMap<String, BTreeSet<Tp>> {
    members
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect()
}

/// The members subscribing to `topic`, in member id order.
fn subscribers<'a>(members: &'a BTreeMap<String, Member>, topic: &str) -> Vec<&'a String> {
    members
        .values()
        .filter(|m| m.subscribed.contains(topic))
        .map(|m| &m.id)
        .collect()
}

/// Each topic's partitions spread evenly over the members subscribing to
/// it, each keeping what it had where the balance allows (Kafka's sticky
/// `uniform` assignor, in its simple form: balanced topic by topic).
pub(super) fn uniform(
    members: &BTreeMap<String, Member>,
    topics: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, BTreeSet<Tp>>,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut out = nothing(members);
    for (topic, n) in topics {
        let subs = subscribers(members, topic);
        if subs.is_empty() {
            continue;
        }
        // A member's partitions of this topic.
        let count = |out: &BTreeMap<String, BTreeSet<Tp>>, m: &str| {
            out[m].iter().filter(|t| t.topic() == topic).count()
        };
        let quota = (*n as usize).div_ceil(subs.len());
        let mut unassigned = Vec::new();
        let name: std::sync::Arc<str> = topic.as_str().into();
        for p in 0..*n {
            let tp = Tp::new(name.clone(), p);
            let keeper = subs.iter().find(|m| {
                previous.get(m.as_str()).is_some_and(|s| s.contains(&tp))
                    && count(&out, m.as_str()) < quota
            });
            match keeper {
                Some(m) => {
                    out.get_mut(m.as_str()).expect("member").insert(tp);
                }
                None => unassigned.push(tp),
            }
        }
        for tp in unassigned {
            let least = subs
                .iter()
                .min_by_key(|m| (count(&out, m.as_str()), m.as_str()))
                .expect("a subscriber");
            out.get_mut(least.as_str()).expect("member").insert(tp);
        }
        // Even out what stickiness left uneven: the most loaded member
        // always holds a partition of this topic to give.
        loop {
            let most = *subs
                .iter()
                .max_by_key(|m| (count(&out, m.as_str()), m.as_str()))
                .expect("a subscriber");
            let least = *subs
                .iter()
                .min_by_key(|m| (count(&out, m.as_str()), m.as_str()))
                .expect("a subscriber");
            if count(&out, most) <= count(&out, least) + 1 {
                break;
            }
            let Some(moved) = out[most.as_str()]
                .iter()
                .rfind(|t| t.topic() == topic)
                .cloned()
            else {
                break;
            };
            out.get_mut(most.as_str()).expect("member").remove(&moved);
            out.get_mut(least.as_str()).expect("member").insert(moved);
        }
    }
    out
}

/// Each topic's partitions in contiguous ranges over its subscribers in
/// member id order (Kafka's `range` assignor: co-partitioned topics land
/// together).
pub(super) fn range(
    members: &BTreeMap<String, Member>,
    topics: &BTreeMap<String, i32>,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut out = nothing(members);
    for (topic, n) in topics {
        let subs = subscribers(members, topic);
        if subs.is_empty() {
            continue;
        }
        let (per, extra) = (*n as usize / subs.len(), *n as usize % subs.len());
        let mut next = 0;
        let name: std::sync::Arc<str> = topic.as_str().into();
        for (i, m) in subs.iter().enumerate() {
            let take = per + usize::from(i < extra);
            for p in next..next + take {
                out.get_mut(m.as_str())
                    .expect("member")
                    .insert(Tp::new(name.clone(), p as i32));
            }
            next += take;
        }
    }
    out
}
