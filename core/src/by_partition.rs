//! A request's partitions, flattened in request order so they can be
//! routed to their owners (`Shard::on_partitions`) or handed to a group,
//! and the answers rebuilt per topic in that same order. Every partition
//! handler (produce, ListOffsets, DeleteRecords, OffsetCommit) goes
//! through it, so none regroups answers by hand.

use crate::error::{ErrorCode, KafkaError};
use crate::topic_partition::TopicPartition;

/// One partition's work: where it stands in its request, which partition,
/// and what to do there.
#[derive(Debug)]
pub struct PartitionWork<A> {
    pub at: usize,
    pub tp: TopicPartition,
    pub arg: A,
}

impl PartitionWork<()> {
    /// The same work, with no argument, on each of `tps`, in order.
    pub fn on_each<'a>(
        tps: impl IntoIterator<Item = &'a TopicPartition>,
    ) -> Vec<PartitionWork<()>> {
        tps.into_iter()
            .enumerate()
            .map(|(at, tp)| PartitionWork {
                at,
                tp: tp.clone(),
                arg: (),
            })
            .collect()
    }
}

impl<A> PartitionWork<A> {
    /// The same work with its argument made another.
    pub fn map<B>(self, f: impl FnOnce(A) -> B) -> PartitionWork<B> {
        PartitionWork {
            at: self.at,
            tp: self.tp,
            arg: f(self.arg),
        }
    }
}

/// One topic's answers: each partition with its result, in request order.
pub type PartitionAnswers<R> = Vec<(i32, Result<R, KafkaError>)>;

/// A topic of the request: how the response names it, its name, and its
/// partitions with their places.
struct Topic<K> {
    key: K,
    name: String,
    parts: Vec<(i32, usize)>,
}

/// A request's partitions in request order. `K` is how the response names
/// a topic (the request's own value, handed back untouched); `A` is what
/// each partition asks for.
pub struct ByPartition<K, A> {
    topics: Vec<Topic<K>>,
    /// Per place: what to do, or why it is refused (taken when routed).
    args: Vec<Option<Result<A, KafkaError>>>,
}

impl<K, A> Default for ByPartition<K, A> {
    fn default() -> Self {
        ByPartition {
            topics: Vec::new(),
            args: Vec::new(),
        }
    }
}

impl<K, A> ByPartition<K, A> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts the next topic: `key` names it in the response.
    pub fn topic(&mut self, key: K, name: impl Into<String>) {
        self.topics.push(Topic {
            key,
            name: name.into(),
            parts: Vec::new(),
        });
    }

    /// The current topic's next partition: what to do there, or why it is
    /// refused before anything runs.
    pub fn partition(&mut self, partition: i32, arg: Result<A, KafkaError>) {
        let at = self.args.len();
        let topic = self
            .topics
            .last_mut()
            .expect("a topic is started before its partitions");
        topic.parts.push((partition, at));
        self.args.push(Some(arg));
    }

    /// How many partitions the request names.
    pub fn len(&self) -> usize {
        self.args.len()
    }

    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }

    /// The partitions not refused, in request order, to run; the refused
    /// ones keep their errors for the answer.
    pub fn work(&mut self) -> Vec<PartitionWork<A>> {
        let mut work = Vec::with_capacity(self.args.len());
        for Topic { name, parts, .. } in &self.topics {
            for &(partition, at) in parts {
                if matches!(self.args[at], Some(Ok(_))) {
                    let Some(Ok(arg)) = self.args[at].take() else {
                        unreachable!("checked above")
                    };
                    work.push(PartitionWork {
                        at,
                        tp: TopicPartition::new(name.clone(), partition),
                        arg,
                    });
                }
            }
        }
        work
    }

    /// The answers per topic, partitions in request order: each its
    /// result by place, a refusal its error, and a partition that got no
    /// result an error saying so.
    pub fn answers<R>(
        self,
        results: impl IntoIterator<Item = (usize, Result<R, KafkaError>)>,
    ) -> Vec<(K, PartitionAnswers<R>)> {
        let mut by_place: Vec<Option<Result<R, KafkaError>>> = self
            .args
            .into_iter()
            .map(|a| match a {
                Some(Err(e)) => Some(Err(e)),
                _ => None,
            })
            .collect();
        for (at, r) in results {
            by_place[at] = Some(r);
        }
        self.topics
            .into_iter()
            .map(|Topic { key, name, parts }| {
                let answers = parts
                    .into_iter()
                    .map(|(partition, at)| {
                        let r = by_place[at].take().unwrap_or_else(|| {
                            Err(KafkaError::new(
                                ErrorCode::UnknownServerError,
                                format!("no answer for {name}-{partition}"),
                            ))
                        });
                        (partition, r)
                    })
                    .collect();
                (key, answers)
            })
            .collect()
    }
}

impl<K, A> ByPartition<K, A> {
    /// The answers of work handed over as a list (to a group's shard, in
    /// `work`'s order) that came back as one error code per item in that
    /// order: per topic, each partition's code in request order.
    pub fn codes(
        self,
        places: Vec<usize>,
        codes: Vec<ErrorCode>,
    ) -> Vec<(K, Vec<(i32, ErrorCode)>)> {
        // A code missing (a coordinator that answered short) leaves its
        // partition the "no answer" error, not a panic on the shard.
        if places.len() != codes.len() {
            log::error!(
                "{} codes for {} items handed over",
                codes.len(),
                places.len()
            );
        }
        let results = places.into_iter().zip(codes.into_iter().map(Ok));
        self.answers(results)
            .into_iter()
            .map(|(key, parts)| {
                let parts = parts
                    .into_iter()
                    .map(|(p, r)| (p, r.unwrap_or_else(|e| e.code)))
                    .collect();
                (key, parts)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_come_back_per_topic_in_request_order() {
        let mut by = ByPartition::new();
        by.topic("A", "a");
        by.partition(2, Ok(20));
        by.partition(
            0,
            Err(KafkaError::new(ErrorCode::CorruptMessage, "refused")),
        );
        by.topic("B", "b");
        by.partition(1, Ok(11));
        by.partition(5, Ok(15));
        assert_eq!(by.len(), 4);
        let work = by.work();
        let names: Vec<_> = work
            .iter()
            .map(|w| (w.at, w.tp.to_string(), w.arg))
            .collect();
        assert_eq!(
            names,
            vec![
                (0, "a-2".into(), 20),
                (2, "b-1".into(), 11),
                (3, "b-5".into(), 15)
            ]
        );
        // Results in any order; one never comes.
        let results = vec![(3, Ok(150)), (0, Ok(200))];
        let answers = by.answers(results);
        assert_eq!(answers.len(), 2);
        let (key, parts) = &answers[0];
        assert_eq!(*key, "A");
        assert_eq!(parts[0].0, 2);
        assert_eq!(parts[0].1.as_ref().unwrap(), &200);
        assert_eq!(parts[1].0, 0);
        assert_eq!(
            parts[1].1.as_ref().unwrap_err().code,
            ErrorCode::CorruptMessage
        );
        let (key, parts) = &answers[1];
        assert_eq!(*key, "B");
        assert_eq!(parts[0].0, 1);
        let lost = parts[0].1.as_ref().unwrap_err();
        assert_eq!(lost.code, ErrorCode::UnknownServerError);
        assert!(lost.message.contains("b-1"), "{lost}");
        assert_eq!(*parts[1].1.as_ref().unwrap(), 150);
    }
}
