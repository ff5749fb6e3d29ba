//! weft-net
