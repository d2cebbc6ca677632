"""Deploying to Google Cloud: the deploy configuration, the flex-template metadata, the gcloud
steps and the monitoring (alerts, dashboard)."""
