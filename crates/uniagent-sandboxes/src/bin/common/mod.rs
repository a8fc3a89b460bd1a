//! Modules the envs binaries share (each binary includes this folder as `mod common`).

pub mod listen;
