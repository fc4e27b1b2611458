//! Users and what is kept of their passwords and tokens: nothing that
//! could give one back. A password is kept as an Argon2id hash (checked by
//! SASL/PLAIN and HTTP Basic) and as SCRAM-SHA-256 and SCRAM-SHA-512
//! verifiers (a salt, an iteration count, the stored key and the server
//! key: enough to check a SCRAM proof, not to make one); a token as its
//! SHA-256 (tokens are random, long and never chosen by people, so a fast
//! hash loses nothing).

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use rand::rngs::OsRng;
use rand::RngCore;
use rsasl::mechanisms::scram::tools::{derive_keys, hash_password};
use serde::{Deserialize, Serialize};
use sha2::digest::generic_array::GenericArray;
use sha2::{Digest, Sha256, Sha512};

/// SCRAM's iteration count for new verifiers (Kafka's default, and
/// RFC 7677's floor).
pub const SCRAM_ITERATIONS: u32 = 4096;

/// A SCRAM mechanism's hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    pub fn mechanism(self) -> &'static str {
        match self {
            ScramHash::Sha256 => "SCRAM-SHA-256",
            ScramHash::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_mechanism(m: &str) -> Option<ScramHash> {
        match m {
            "SCRAM-SHA-256" => Some(ScramHash::Sha256),
            "SCRAM-SHA-512" => Some(ScramHash::Sha512),
            _ => None,
        }
    }
}

/// What checks a SCRAM proof (RFC 5802 section 3), in hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramVerifier {
    pub iterations: u32,
    pub salt: String,
    pub stored_key: String,
    pub server_key: String,
}

impl ScramVerifier {
    /// A verifier of `password` with a fresh random salt.
    pub fn new(hash: ScramHash, password: &str, iterations: u32) -> ScramVerifier {
        let mut salt = [0u8; 24];
        OsRng.fill_bytes(&mut salt);
        let (stored, server) = match hash {
            ScramHash::Sha256 => {
                let mut salted = GenericArray::default();
                hash_password::<Sha256>(password.as_bytes(), iterations, &salt, &mut salted);
                let (client_key, server_key) = derive_keys::<Sha256>(&salted);
                (Sha256::digest(client_key).to_vec(), server_key.to_vec())
            }
            ScramHash::Sha512 => {
                let mut salted = GenericArray::default();
                hash_password::<Sha512>(password.as_bytes(), iterations, &salt, &mut salted);
                let (client_key, server_key) = derive_keys::<Sha512>(&salted);
                (Sha512::digest(client_key).to_vec(), server_key.to_vec())
            }
        };
        ScramVerifier {
            iterations,
            salt: hex(&salt),
            stored_key: hex(&stored),
            server_key: hex(&server),
        }
    }
}

/// A user: its password's hash and verifiers, and its tokens' hashes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    /// Argon2id, as a PHC string (its parameters and salt inside).
    pub password_hash: String,
    pub scram_sha_256: ScramVerifier,
    pub scram_sha_512: ScramVerifier,
    /// SHA-256 of each token made for the user (hex).
    #[serde(default)]
    pub tokens: Vec<String>,
}

impl User {
    /// A user with `password` (hashed and made into verifiers here: call
    /// off the shard's executor, it takes tens of milliseconds).
    pub fn new(name: &str, password: &str) -> User {
        User {
            name: name.to_string(),
            password_hash: hash_password_argon2(password),
            scram_sha_256: ScramVerifier::new(ScramHash::Sha256, password, SCRAM_ITERATIONS),
            scram_sha_512: ScramVerifier::new(ScramHash::Sha512, password, SCRAM_ITERATIONS),
            tokens: Vec::new(),
        }
    }

    /// Whether `password` is the user's password, or one of its tokens
    /// (slow for a password: call off the shard's executor).
    pub fn check(&self, password: &str) -> bool {
        if self.tokens.contains(&token_hash(password)) {
            return true;
        }
        PasswordHash::new(&self.password_hash).is_ok_and(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
    }

    pub fn scram(&self, hash: ScramHash) -> &ScramVerifier {
        match hash {
            ScramHash::Sha256 => &self.scram_sha_256,
            ScramHash::Sha512 => &self.scram_sha_512,
        }
    }
}

fn hash_password_argon2(password: &str) -> String {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .expect("Argon2 takes any password")
        .to_string()
}

/// A new random token (32 bytes, hex).
pub fn new_token() -> String {
    let mut b = [0u8; 32];
    OsRng.fill_bytes(&mut b);
    hex(&b)
}

/// What is kept of a token.
pub fn token_hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_checks_and_nothing_gives_it_back() {
        let mut u = User::new("alice", "correct horse");
        assert!(u.check("correct horse"));
        assert!(!u.check("correct horsE"));
        assert!(!u.check(""));
        let kept = serde_json::to_string(&u).unwrap();
        assert!(!kept.contains("correct horse"));
        assert!(u.password_hash.starts_with("$argon2id$"));
        assert_eq!(u.scram_sha_256.iterations, SCRAM_ITERATIONS);
        assert_eq!(unhex(&u.scram_sha_256.stored_key).unwrap().len(), 32);
        assert_eq!(unhex(&u.scram_sha_512.server_key).unwrap().len(), 64);
        assert_ne!(u.scram_sha_256.salt, u.scram_sha_512.salt);
        // A token signs in as the user; only its hash is kept.
        let token = new_token();
        u.tokens.push(token_hash(&token));
        assert!(u.check(&token));
        assert!(!serde_json::to_string(&u).unwrap().contains(&token));
    }
}
