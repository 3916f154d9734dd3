"""Finished runs read back, archived and compared figure by figure, with a regression gate."""
