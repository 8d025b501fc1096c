
pub mod git;
