"""Research kept out of the product: studies of the kernels that the package does not ship or need."""
