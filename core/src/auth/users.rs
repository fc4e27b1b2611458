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

    /// Kafka's ScramMechanism codes (1: SHA-256, 2: SHA-512).
    pub fn from_code(c: i8) -> Option<ScramHash> {
        match c {
            1 => Some(ScramHash::Sha256),
            2 => Some(ScramHash::Sha512),
            _ => None,
        }
    }

    pub fn code(self) -> i8 {
        match self {
            ScramHash::Sha256 => 1,
            ScramHash::Sha512 => 2,
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
        let salted = match hash {
            ScramHash::Sha256 => {
                let mut out = GenericArray::default();
                hash_password::<Sha256>(password.as_bytes(), iterations, &salt, &mut out);
                out.to_vec()
            }
            ScramHash::Sha512 => {
                let mut out = GenericArray::default();
                hash_password::<Sha512>(password.as_bytes(), iterations, &salt, &mut out);
                out.to_vec()
            }
        };
        ScramVerifier::from_salted(hash, &salt, iterations, &salted)
    }

    /// A verifier from a salted password (RFC 5802's SaltedPassword, as
    /// AlterUserScramCredentials carries it: the client ran the PBKDF2).
    pub fn from_salted(hash: ScramHash, salt: &[u8], iterations: u32, salted: &[u8]) -> Self {
        let (stored, server) = match hash {
            ScramHash::Sha256 => {
                let (client_key, server_key) = derive_keys::<Sha256>(salted);
                (Sha256::digest(client_key).to_vec(), server_key.to_vec())
            }
            ScramHash::Sha512 => {
                let (client_key, server_key) = derive_keys::<Sha512>(salted);
                (Sha512::digest(client_key).to_vec(), server_key.to_vec())
            }
        };
        ScramVerifier {
            iterations,
            salt: hex(salt),
            stored_key: hex(&stored),
            server_key: hex(&server),
        }
    }
}

/// A user: its password's hash and verifiers, and its tokens' hashes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    /// Argon2id, as a PHC string (its parameters and salt inside); none
    /// for a user made by AlterUserScramCredentials (SCRAM only, as Kafka).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scram_sha_256: Option<ScramVerifier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scram_sha_512: Option<ScramVerifier>,
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
            password_hash: Some(hash_password_argon2(password)),
            scram_sha_256: Some(ScramVerifier::new(
                ScramHash::Sha256,
                password,
                SCRAM_ITERATIONS,
            )),
            scram_sha_512: Some(ScramVerifier::new(
                ScramHash::Sha512,
                password,
                SCRAM_ITERATIONS,
            )),
            tokens: Vec::new(),
        }
    }

    /// Whether `password` is the user's password, or one of its tokens
    /// (slow for a password: call off the shard's executor).
    pub fn check(&self, password: &str) -> bool {
        if self.tokens.contains(&token_hash(password)) {
            return true;
        }
        let Some(kept) = &self.password_hash else {
            return false;
        };
        PasswordHash::new(kept).is_ok_and(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
    }

    pub fn scram(&self, hash: ScramHash) -> Option<&ScramVerifier> {
        match hash {
            ScramHash::Sha256 => self.scram_sha_256.as_ref(),
            ScramHash::Sha512 => self.scram_sha_512.as_ref(),
        }
    }

    pub fn scram_mut(&mut self, hash: ScramHash) -> &mut Option<ScramVerifier> {
        match hash {
            ScramHash::Sha256 => &mut self.scram_sha_256,
            ScramHash::Sha512 => &mut self.scram_sha_512,
        }
    }

    /// A user with nothing to sign in with (its credentials deleted).
    pub fn is_empty(&self) -> bool {
        self.password_hash.is_none()
            && self.scram_sha_256.is_none()
            && self.scram_sha_512.is_none()
            && self.tokens.is_empty()
    }
}

/// A verifier for a name that is no user's: stable for the name (while
/// the node runs) and matching no password, so a SCRAM exchange for it
/// looks like a real user's up to the failed proof (a salt that changed
/// with every try would tell the names apart).
pub fn fake_verifier(hash: ScramHash, name: &str) -> ScramVerifier {
    static SECRET: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    let secret = SECRET.get_or_init(|| {
        let mut s = [0u8; 32];
        OsRng.fill_bytes(&mut s);
        s
    });
    let derive = |what: &[u8]| {
        let mut h = Sha256::new();
        h.update(secret);
        h.update(what);
        h.update([hash.code() as u8]);
        h.update(name.as_bytes());
        h.finalize()
    };
    let salt = derive(b"salt");
    let key = derive(b"key");
    let (stored, server) = match hash {
        ScramHash::Sha256 => (key.to_vec(), derive(b"server").to_vec()),
        ScramHash::Sha512 => ([key, key].concat(), [salt, key].concat()),
    };
    ScramVerifier {
        iterations: SCRAM_ITERATIONS,
        salt: hex(&salt[..24]),
        stored_key: hex(&stored),
        server_key: hex(&server),
    }
}

/// Checks `password` against a hash of nothing, as long as a user's check
/// takes, for names that are no user's.
pub fn check_nobody(password: &str) {
    static NOBODY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let kept = NOBODY.get_or_init(|| hash_password_argon2(&new_token()));
    if let Ok(h) = PasswordHash::new(kept) {
        let _ = Argon2::default().verify_password(password.as_bytes(), &h);
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
        assert!(u.password_hash.as_ref().unwrap().starts_with("$argon2id$"));
        let (s256, s512) = (
            u.scram_sha_256.clone().unwrap(),
            u.scram_sha_512.clone().unwrap(),
        );
        assert_eq!(s256.iterations, SCRAM_ITERATIONS);
        assert_eq!(unhex(&s256.stored_key).unwrap().len(), 32);
        assert_eq!(unhex(&s512.server_key).unwrap().len(), 64);
        assert_ne!(s256.salt, s512.salt);
        // A token signs in as the user; only its hash is kept.
        let token = new_token();
        u.tokens.push(token_hash(&token));
        assert!(u.check(&token));
        assert!(!serde_json::to_string(&u).unwrap().contains(&token));
    }
}
