//! How SQL fails: [`SqlResult`] inside a statement's parts (a message
//! saying what is wrong with the statement), [`SqlError`] for a whole
//! statement. Every other SQL module sits above this one.

/// A statement that cannot run, with what is wrong.
pub type SqlResult<T> = Result<T, String>;

/// Why a statement failed: the statement (400) or the node (500).
#[derive(Debug, Clone, PartialEq)]
pub enum SqlError {
    Statement(String),
    Node(String),
    /// The caller may not (403).
    Denied(String),
}

impl From<String> for SqlError {
    fn from(s: String) -> Self {
        SqlError::Statement(s)
    }
}
