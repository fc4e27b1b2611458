//! A topic-partition: the unit every request, log and map is keyed by.
//!
//! The topic's name is shared (`Arc<str>`), so a clone is a count and a
//! key moves between shards without copying; a map keyed by it is looked up
//! with a borrowed `(&str, i32)` (`TopicPartitionRef`), so a lookup
//! allocates nothing.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A topic-partition by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// What a map keyed by `TopicPartition` is looked up with: an owned key or
/// a borrowed `(&str, i32)`, hashed and compared alike.
pub trait TopicPartitionRef {
    fn parts(&self) -> (&str, i32);
}

impl TopicPartitionRef for TopicPartition {
    fn parts(&self) -> (&str, i32) {
        (&self.topic, self.partition)
    }
}

impl TopicPartitionRef for (&str, i32) {
    fn parts(&self) -> (&str, i32) {
        (self.0, self.1)
    }
}

impl Hash for dyn TopicPartitionRef + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

impl PartialEq for dyn TopicPartitionRef + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn TopicPartitionRef + '_ {}

impl PartialOrd for dyn TopicPartitionRef + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

// Ordered as the owned key is (topic, then partition), so that an ordered
// map keyed by `TopicPartition` is looked up by borrowed parts too.
impl Ord for dyn TopicPartitionRef + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

// Hashed as its borrowed form is, so that `Borrow` below is sound.
impl Hash for TopicPartition {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

impl<'a> Borrow<dyn TopicPartitionRef + 'a> for TopicPartition {
    fn borrow(&self) -> &(dyn TopicPartitionRef + 'a) {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn a_map_is_looked_up_by_borrowed_parts() {
        let mut map = HashMap::new();
        map.insert(TopicPartition::new("orders", 3), 7);
        map.insert(TopicPartition::new("orders", 4), 8);
        let key: &dyn TopicPartitionRef = &("orders", 3);
        assert_eq!(map.get(key), Some(&7));
        let missing: &dyn TopicPartitionRef = &("orders", 5);
        assert_eq!(map.get(missing), None);
        assert_eq!(map.get(&TopicPartition::new("orders", 4)), Some(&8));
    }

    #[test]
    fn an_ordered_map_orders_and_finds_as_the_parts_do() {
        let mut map = std::collections::BTreeMap::new();
        for (t, p) in [("b", 1), ("a", 10), ("a", 2)] {
            map.insert(TopicPartition::new(t, p), p);
        }
        let order: Vec<_> = map
            .keys()
            .map(|k| (k.topic().to_string(), k.partition))
            .collect();
        assert_eq!(order, [("a".into(), 2), ("a".into(), 10), ("b".into(), 1)]);
        let key: &dyn TopicPartitionRef = &("a", 10);
        assert_eq!(map.get(key), Some(&10));
    }
}
