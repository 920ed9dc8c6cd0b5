"""The Flask operations portal: arrives after the "Cluster" issue."""
