//! One file per on-disk record, each with its parser and emitter side by
//! side. nom is used only inside this module.

pub(crate) mod crypt_info;
pub(crate) mod cursor;
pub(crate) mod file_header;
pub(crate) mod metadata;
pub(crate) mod tensor_header;
