#![no_main]
use libfuzzer_sys::fuzz_target;
use tensorizer_native::store::resp::{
    BulkHead, MAX_ARRAY, MAX_BULK, MAX_DEPTH, Reply, decode, decode_bulk_head,
};

/// Checks a decoded reply against the limits; its depth of arrays.
fn within_limits(reply: &Reply) -> usize {
    match reply {
        Reply::Bulk(Some(b)) => {
            assert!(b.len() as u64 <= MAX_BULK);
            0
        }
        Reply::Array(Some(items)) => {
            assert!(items.len() as u64 <= MAX_ARRAY);
            1 + items.iter().map(within_limits).max().unwrap_or(0)
        }
        _ => 0,
    }
}

// RESP2 replies from any bytes (the first byte picks the room of a
// caller's buffer for the bulk head): the decoder returns, takes no more
// bytes than it was given, stays within its limits, and decodes the same
// reply from the bytes it took alone; a prefix of them is incomplete
// (never another reply nor an error), and a bulk head fits its room.
fuzz_target!(|data: &[u8]| {
    let Some((&room, input)) = data.split_first() else { return };
    if let Ok(Some((reply, used))) = decode(input) {
        assert!(0 < used && used <= input.len());
        assert!(within_limits(&reply) <= MAX_DEPTH);
        assert_eq!(decode(&input[..used]), Ok(Some((reply, used))));
        for cut in [used - 1, used / 2] {
            assert_eq!(decode(&input[..cut]), Ok(None));
        }
    }
    if let Ok(Some((head, used))) = decode_bulk_head(input, usize::from(room)) {
        assert!(0 < used && used <= input.len());
        if let BulkHead::Bytes(n) = head {
            assert!(n <= usize::from(room));
        }
    }
});
