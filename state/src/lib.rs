pub fn placeholder() {}
pub mod purgatory;
