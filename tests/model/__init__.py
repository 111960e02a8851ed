"""Tests of model/: the network, capture, decoding, analyses, checkpoints, interop, training, the command lines."""
