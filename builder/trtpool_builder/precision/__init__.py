"""fp16, int8 and fp8 graphs, and how far their outputs are from fp32's: conversion, the
fp16 range checks, sample inputs and accuracy reports. Imports graph/ only."""
