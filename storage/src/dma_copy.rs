//! Copying large pieces into and out of DMA buffers without passing
//! through the cache.
//!
//! Every flush copies the partition's new bytes (a megabyte or more under
//! load) into a freshly taken DMA buffer that only the device reads, and
//! every read from disk copies what the device put into glommio's DMA
//! buffer into memory the read's `Bytes` own (glommio's buffer is tied to
//! its shard and cannot travel in a `Bytes`). An ordinary `memcpy` of that
//! size (glibc uses `rep movsb` up to its non-temporal threshold, ~200 MB on
//! this machine) reads each destination line into the cache before
//! overwriting it, and then evicts the data the shard is about to touch
//! (the next requests' bytes, their CRCs). A streaming (non-temporal) store
//! writes whole lines straight to memory: measured 1.3–2.5x the copy rate
//! for 64 KiB–2.5 MiB pieces here (bench/HISTORY.md, 2a6b171). Our own code
//! because it is the produce path's and the disk read path's one large
//! copy; small pieces (the 61-byte patched headers) use `copy_from_slice`.
//!
//! Streaming stores are weakly ordered: [`fence`] must run after the last
//! copy and before the buffer goes to the device ([`gather`] fences itself).

use bytes::{Bytes, BytesMut};

/// Below this a piece is copied the ordinary way (the fixed costs and the
/// unaligned head and tail are not worth it, and the lines may be reused).
const STREAM_MIN: usize = 16 * 1024;

/// Copies `src` into `dst` (same length), streaming large pieces past the
/// cache. Call [`fence`] before the device reads `dst`.
pub fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "dma_copy::copy of unequal lengths");
    // SAFETY: `dst` is valid for `src.len()` bytes (asserted just above).
    unsafe { copy_raw(dst.as_mut_ptr(), src) };
}

/// The pieces copied one after another into new memory, streamed past the
/// cache when large, and fenced.
pub fn gather<'a>(pieces: impl IntoIterator<Item = &'a [u8]> + Clone) -> Bytes {
    let total = pieces.clone().into_iter().map(<[u8]>::len).sum();
    let mut out = BytesMut::with_capacity(total);
    for piece in pieces {
        let at = out.len();
        // A `Clone` iterator may yield other pieces the second time: the
        // capacity was counted from the first pass, so check each piece.
        assert!(
            piece.len() <= out.capacity() - at,
            "gather: a piece past the total its first pass counted"
        );
        // SAFETY: checked just above: `piece.len()` bytes from `at` are
        // allocated; they are initialised by the copy before `set_len`
        // makes them part of `out`.
        unsafe {
            copy_raw(out.as_mut_ptr().add(at), piece);
            out.set_len(at + piece.len());
        }
    }
    fence();
    out.freeze()
}

/// Copies `src` to `dst`.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes and not overlap `src`.
unsafe fn copy_raw(dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if src.len() >= STREAM_MIN && std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present (checked just above); the caller vouches
        // for `dst`.
        unsafe { stream_avx2(dst, src) };
        return;
    }
    // SAFETY: the caller vouches for `dst`.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
}

/// Orders every streaming store made so far before any later store (the
/// submission that hands the buffer to the device).
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SFENCE has no preconditions (SSE, baseline on x86_64).
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// 32-byte streaming stores from unaligned loads: the destination's
/// unaligned head and the tail that does not fill 128 bytes are copied
/// ordinarily.
///
/// # Safety
/// AVX2 must be present; `dst` valid for writes of `src.len()` bytes, not
/// overlapping `src`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream_avx2(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256};
    use std::ptr::copy_nonoverlapping;
    let n = src.len();
    let head = ((dst as usize).wrapping_neg() & 31).min(n);
    let body = (n - head) & !127;
    // SAFETY: `d` walks [head, head + body) of `dst`, 32-byte aligned (head
    // brings it there); `s` walks the same range of `src`, read unaligned;
    // body is a multiple of 128, so each step's four vectors are in range.
    // The head and the tail are within `n` bytes of both.
    unsafe {
        copy_nonoverlapping(src.as_ptr(), dst, head);
        let mut d = dst.add(head).cast::<__m256i>();
        let mut s = src.as_ptr().add(head).cast::<__m256i>();
        let end = d.add(body / 32);
        while d < end {
            let a = _mm256_loadu_si256(s);
            let b = _mm256_loadu_si256(s.add(1));
            let c = _mm256_loadu_si256(s.add(2));
            let e = _mm256_loadu_si256(s.add(3));
            _mm256_stream_si256(d, a);
            _mm256_stream_si256(d.add(1), b);
            _mm256_stream_si256(d.add(2), c);
            _mm256_stream_si256(d.add(3), e);
            d = d.add(4);
            s = s.add(4);
        }
        let done = head + body;
        copy_nonoverlapping(src.as_ptr().add(done), dst.add(done), n - done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length around the streaming threshold and the 128-byte step,
    /// at every destination and source misalignment within a vector.
    #[test]
    fn copies_exactly_at_every_alignment() {
        let src: Vec<u8> = (0..STREAM_MIN * 3).map(|i| (i * 131 % 251) as u8).collect();
        let lens = [
            0,
            1,
            127,
            STREAM_MIN - 1,
            STREAM_MIN,
            STREAM_MIN + 1,
            STREAM_MIN + 127,
            STREAM_MIN + 128,
            2 * STREAM_MIN + 77,
        ];
        for len in lens {
            for d_off in [0, 1, 5, 31, 32, 33] {
                for s_off in [0, 3, 31] {
                    let mut dst = vec![0xAAu8; len + 64 + d_off];
                    copy(&mut dst[d_off..d_off + len], &src[s_off..s_off + len]);
                    fence();
                    assert_eq!(&dst[d_off..d_off + len], &src[s_off..s_off + len]);
                    assert!(dst[..d_off].iter().all(|&b| b == 0xAA), "wrote before");
                    assert!(dst[d_off + len..].iter().all(|&b| b == 0xAA), "wrote after");
                }
            }
        }
    }

    /// Pieces around the threshold come out joined, in order, exactly.
    #[test]
    fn gathers_pieces_in_order() {
        let src: Vec<u8> = (0..STREAM_MIN * 4).map(|i| (i * 7 % 253) as u8).collect();
        let cuts = [0, 1, 33, STREAM_MIN + 5, 3 * STREAM_MIN, 4 * STREAM_MIN];
        let pieces: Vec<&[u8]> = cuts.windows(2).map(|w| &src[w[0]..w[1]]).collect();
        let out = gather(pieces.iter().copied());
        assert_eq!(&out[..], &src[..]);
        assert!(gather(std::iter::empty()).is_empty());
    }
}
