//! weft-testkit
