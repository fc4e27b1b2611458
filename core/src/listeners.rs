//! Who listens on a TCP port, from the kernel's tables (`/proc/net/tcp`,
//! `/proc/net/tcp6`) and the processes' descriptors (`/proc/*/fd`): used at
//! start-up to tell a live listener from sockets a killed process left
//! behind in its io_uring instance.

use std::collections::HashSet;

/// Listening sockets on a port, as far as this process can see.
#[derive(Debug, PartialEq, Eq)]
pub enum Listeners {
    /// None.
    None,
    /// Some, and no process holds any of them (their owner exited; the
    /// kernel has yet to release them). The count.
    Orphaned(usize),
    /// Some, held by a process, or by one whose descriptors cannot be read.
    Held,
}

/// Who listens on `port`.
pub fn on_port(port: u16) -> Listeners {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return Listeners::None;
    }
    match held(&inodes) {
        Some(false) => Listeners::Orphaned(inodes.len()),
        _ => Listeners::Held,
    }
}

/// The socket inodes in LISTEN state on `port` (IPv4 and IPv6).
fn listening_inodes(port: u16) -> HashSet<u64> {
    let mut out = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            let local_port = f[1]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                if let Ok(inode) = f[9].parse::<u64>() {
                    out.insert(inode);
                }
            }
        }
    }
    out
}

/// Whether any process holds one of `inodes` (`None`: some process's
/// descriptors could not be read, so it may).
fn held(inodes: &HashSet<u64>) -> Option<bool> {
    let mut unreadable = false;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return None;
    };
    for p in procs.flatten() {
        let name = p.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            // Gone meanwhile, or another user's.
            unreadable |= p.path().exists();
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let t = target.to_string_lossy();
            let inode = t
                .strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .and_then(|n| n.parse::<u64>().ok());
            if inode.is_some_and(|i| inodes.contains(&i)) {
                return Some(true);
            }
        }
    }
    if unreadable {
        None
    } else {
        Some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_this_process_listens_on_is_held_and_a_closed_one_is_free() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        // Held by this very process (readable whatever the user).
        assert_eq!(on_port(port), Listeners::Held);
        drop(l);
        assert_eq!(on_port(port), Listeners::None);
    }
}
