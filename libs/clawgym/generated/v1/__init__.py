"""Generated gRPC stubs (proto/generate.py). Never edit by hand."""
