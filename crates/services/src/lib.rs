//! weft-services
