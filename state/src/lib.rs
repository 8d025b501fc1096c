pub mod identifier;

pub fn placeholder() {}
