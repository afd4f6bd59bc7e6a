"""Images: reading sources, flattening layers, and writing .sif and Enroot .sqsh artifacts."""
