"""Tests of the decoder and the transports against hostile input and hostile processes."""
