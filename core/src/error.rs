//! Kafka error codes, as the protocol numbers them, and an error carrying one
//! with a message for the client and the log.

/// The Kafka error codes weir answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(i16)]
pub enum ErrorCode {
    UnknownServerError = -1,
    None = 0,
    OffsetOutOfRange = 1,
    CorruptMessage = 2,
    UnknownTopicOrPartition = 3,
    LeaderNotAvailable = 5,
    NotLeaderOrFollower = 6,
    RequestTimedOut = 7,
    MessageTooLarge = 10,
    OffsetMetadataTooLarge = 12,
    CoordinatorLoadInProgress = 14,
    CoordinatorNotAvailable = 15,
    NotCoordinator = 16,
    InvalidTopicException = 17,
    RecordListTooLarge = 18,
    NotEnoughReplicas = 19,
    NotEnoughReplicasAfterAppend = 20,
    InvalidRequiredAcks = 21,
    IllegalGeneration = 22,
    InconsistentGroupProtocol = 23,
    InvalidGroupId = 24,
    UnknownMemberId = 25,
    InvalidSessionTimeout = 26,
    RebalanceInProgress = 27,
    TopicAuthorizationFailed = 29,
    GroupAuthorizationFailed = 30,
    ClusterAuthorizationFailed = 31,
    InvalidTimestamp = 32,
    UnsupportedSaslMechanism = 33,
    IllegalSaslState = 34,
    UnsupportedVersion = 35,
    TopicAlreadyExists = 36,
    InvalidPartitions = 37,
    InvalidReplicationFactor = 38,
    InvalidReplicaAssignment = 39,
    InvalidConfig = 40,
    NotController = 41,
    InvalidRequest = 42,
    UnsupportedForMessageFormat = 43,
    PolicyViolation = 44,
    TransactionalIdAuthorizationFailed = 53,
    OutOfOrderSequenceNumber = 45,
    InvalidProducerEpoch = 47,
    InvalidTxnState = 48,
    InvalidProducerIdMapping = 49,
    InvalidTransactionTimeout = 50,
    ConcurrentTransactions = 51,
    TransactionCoordinatorFenced = 52,
    KafkaStorageError = 56,
    FencedLeaderEpoch = 74,
    UnknownLeaderEpoch = 75,
    SaslAuthenticationFailed = 58,
    NonEmptyGroup = 68,
    GroupIdNotFound = 69,
    MemberIdRequired = 79,
    FencedInstanceId = 82,
    GroupSubscribedToTopic = 86,
    InvalidRecord = 87,
    ResourceNotFound = 91,
    DuplicateResource = 92,
    ProducerFenced = 90,
    UnacceptableCredential = 93,
    UnknownTopicId = 100,
    BrokerIdNotRegistered = 102,
    OperationNotAttempted = 55,
    UnstableOffsetCommit = 88,
    InconsistentTopicId = 103,
    TransactionalIdNotFound = 105,
    FencedMemberEpoch = 110,
    UnreleasedInstanceId = 111,
    UnsupportedAssignor = 112,
    StaleMemberEpoch = 113,
    OffsetNotAvailable = 78,
    PreferredLeaderNotAvailable = 80,
    EligibleLeadersNotAvailable = 83,
    ElectionNotNeeded = 84,
    NoReassignmentInProgress = 85,
    InvalidRegularExpression = 128,
}

impl ErrorCode {
    pub fn code(self) -> i16 {
        self as i16
    }
}

/// An error code with a human message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaError {
    pub code: ErrorCode,
    pub message: String,
    /// The record of the batch that is at fault (INVALID_RECORD).
    pub record_index: Option<i32>,
    /// For the node's log only: what the client's message leaves out (the
    /// start of a refused record's value).
    pub detail: Option<String>,
    /// NOT_LEADER_OR_FOLLOWER: the node that leads the partition (told to
    /// clients as KIP-951's current leader), and its leader epoch.
    pub leader: Option<i32>,
    pub leader_epoch: i32,
}

impl KafkaError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> KafkaError {
        KafkaError {
            code,
            message: message.into(),
            record_index: None,
            detail: None,
            leader: None,
            leader_epoch: -1,
        }
    }

    /// A partition another node of the cluster leads.
    pub fn not_leader(topic: &str, partition: i32, leader: i32) -> KafkaError {
        KafkaError {
            leader: Some(leader),
            ..KafkaError::new(
                ErrorCode::NotLeaderOrFollower,
                format!(
                    "broker {leader} leads partition {partition} of topic {topic:?}, not this node"
                ),
            )
        }
    }

    pub fn unknown_partition(topic: &str, partition: i32) -> KafkaError {
        KafkaError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("this node has no partition {partition} of topic {topic:?}"),
        )
    }
}

impl std::fmt::Display for KafkaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

/// How storage failures reach clients.
impl From<weir_storage::StorageError> for KafkaError {
    fn from(e: weir_storage::StorageError) -> KafkaError {
        use weir_storage::producer_state::SequenceError;
        use weir_storage::StorageError as S;
        let code = match &e {
            S::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            S::Sequence(SequenceError::OutOfOrder { .. }) => ErrorCode::OutOfOrderSequenceNumber,
            S::Sequence(SequenceError::StaleEpoch { .. }) => ErrorCode::InvalidProducerEpoch,
            S::Sequence(SequenceError::CoordinatorFenced { .. }) => {
                ErrorCode::TransactionCoordinatorFenced
            }
            // A failed disk is Kafka's storage error: the client retries, and
            // nothing is acknowledged that was not synced.
            S::Io(_) | S::Corrupt(_) => ErrorCode::KafkaStorageError,
            S::NotLeader(_) => ErrorCode::NotLeaderOrFollower,
        };
        KafkaError::new(code, e.to_string())
    }
}

/// How a refused produced batch reaches clients.
impl From<weir_storage::batch::BatchError> for KafkaError {
    fn from(e: weir_storage::batch::BatchError) -> KafkaError {
        use weir_storage::batch::BatchError as B;
        let code = match &e {
            B::Corrupt(_) => ErrorCode::CorruptMessage,
            B::UnsupportedMagic(_) => ErrorCode::UnsupportedForMessageFormat,
            B::InvalidRecord(_) => ErrorCode::InvalidRecord,
        };
        KafkaError::new(code, e.to_string())
    }
}
