"""The broker process (data plane): arrives with the "Cluster" issue."""
