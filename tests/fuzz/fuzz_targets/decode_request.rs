//! Any frame body: decoding returns a request or an error, never panics,
//! never allocates beyond the frame.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = weir_net::codec::decode_request(bytes::Bytes::copy_from_slice(data));
});
