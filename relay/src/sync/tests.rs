//! Integration-style tests of the syncer against real git over smart HTTP.
