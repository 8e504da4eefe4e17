//! keyflight proxy-wasm filter (implemented in the edge-filter issue).
