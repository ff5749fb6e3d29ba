//! weft-layout
