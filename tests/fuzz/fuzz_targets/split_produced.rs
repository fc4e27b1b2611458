//! Any produce records field: batch validation accepts or refuses, never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = weir_storage::batch::split_produced(&bytes::Bytes::copy_from_slice(data));
});
