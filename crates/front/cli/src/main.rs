//! weft-cli
fn main(){}
