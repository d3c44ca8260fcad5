//! Integration tests of the native host: reading every vector, writing
//! atomically, converting, and the `tzr` command line.

mod atomic;
mod checkpoint;
mod cli;
mod cli_formats;
mod cloud;
mod cold;
mod common;
mod convert;
mod faults;
mod fingerprint;
mod http;
mod limits;
mod messages;
mod read_write;
mod redis;
mod redis_cluster;
mod s3;
mod safetensors_read;
mod servers;
mod shards;
mod slices;
mod staging;
mod store;
mod tls;
mod written_read;
