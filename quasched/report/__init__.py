"""Terminal tables, CSV files and plots of experiment results."""
